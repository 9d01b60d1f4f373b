"""A real single-node Slurm cluster for the tests: munged, slurmctld and
slurmd, started in a folder of their own and stopped by the process ids
started here.

Everything the daemons read or write lives under that folder: the munge key
and socket, ``slurm.conf`` and ``gres.conf``, the state and spool folders,
the logs and pid files; the ports are free ones picked now. Nothing of the
machine's own Slurm or munge (if it has any) is read or touched, and the
clients (sbatch, squeue, scancel) find this cluster through ``SLURM_CONF``.

The machine has no GPU. The node declares one GPU generic resource backed by
a stand-in device file (``Gres=gpu:1``, ``Name=gpu File=/dev/null``) so that
``--gres=gpu:1`` tasks schedule: a count without a file leaves the node
invalid.

Run as a script it starts the cluster, prints its environment and waits for
Ctrl-C (for trying the README's commands by hand).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")


class SlurmUnavailable(Exception):
    pass


def missing_commands() -> list[str]:
    return [c for c in NEEDED if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin") / name)


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class Cluster:
    root: Path
    # slurmctld compares SlurmctldHost with the short host name.
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment of a client of this cluster (and of the jobs it
        runs, which inherit the submitter's)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        p = subprocess.run([_which(cmd[0]), *cmd[1:]], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
        return p

    # ── set-up ──────────────────────────────────────────────────────────────

    def write_config(self) -> None:
        r = self.root
        for d in ("etc", "munge", "state", "spool", "log", "run"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        ctld_port, d_port = _free_ports(2)
        cpus = os.cpu_count() or 1
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=leverctltest",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    f"SlurmctldPort={ctld_port}",
                    f"SlurmdPort={d_port}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"AuthInfo=socket={r / 'munge' / 'munge.socket'}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"StateSaveLocation={r / 'state'}",
                    f"SlurmdSpoolDir={r / 'spool'}",
                    f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    # The test loop is seconds long: schedule at once, reap at once.
                    "SchedulerParameters=sched_interval=1,bf_interval=1",
                    "MinJobAge=300",
                    "KillWait=2",
                    "SlurmctldTimeout=30",
                    "SlurmdTimeout=30",
                    "GresTypes=gpu",
                    f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:1 State=UNKNOWN",
                    f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        # A GPU stand-in: a device file the node can name, so gpu:1 is valid.
        (r / "etc" / "gres.conf").write_text(f"NodeName={self.node} Name=gpu File=/dev/null\n")

    def start(self, timeout: float = 60) -> None:
        missing = missing_commands()
        if missing:
            raise SlurmUnavailable(f"not installed: {', '.join(missing)} (apt-get install {' '.join(PACKAGES)})")
        self.write_config()
        r = self.root
        key = r / "munge" / "munge.key"
        self.run("mungekey", "--create", f"--keyfile={key}")
        os.chmod(key, 0o600)
        self._spawn(
            "munged",
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={r / 'munge' / 'munge.socket'}",
                f"--pid-file={r / 'run' / 'munged.pid'}",
                f"--log-file={r / 'log' / 'munged.log'}",
                f"--seed-file={r / 'munge' / 'seed'}",
            ],
        )
        self._wait(lambda: (r / "munge" / "munge.socket").exists(), timeout, "munged to open its socket")
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(self.node_idle, timeout, f"node {self.node} to be idle")

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs.append(
            subprocess.Popen(
                cmd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        log.close()

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(
                    f"waiting for {what}: {dead[0].args[0]} exited with {dead[0].returncode}; " + self.logs_tail()
                )
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"waited {timeout:.0f} s for {what}; " + self.logs_tail())

    def node_idle(self) -> bool:
        p = self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False, timeout=10)
        return p.returncode == 0 and p.stdout.strip() == "idle"

    def logs_tail(self, lines: int = 8) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            try:
                tail = f.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            if tail:
                out.append(f"{f.name}: " + " | ".join(tail))
        return "; ".join(out)

    # ── tear-down ───────────────────────────────────────────────────────────

    def stop(self) -> None:
        """Cancel this cluster's jobs (their processes belong to slurmd's job
        steps, which scancel ends), then stop the daemons started here, by
        their process ids, newest first."""
        if self.procs and all(p.poll() is None for p in self.procs):
            import getpass

            try:
                self.run("scancel", f"--user={getpass.getuser()}", check=False, timeout=20)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and self.run("squeue", "-h", check=False, timeout=10).stdout.strip():
                    time.sleep(0.3)
            except (OSError, subprocess.SubprocessError):
                pass
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs.clear()

    def __enter__(self) -> "Cluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="leverctl-slurm-") as tmp, Cluster(Path(tmp)) as c:
        print(f"export SLURM_CONF={c.conf}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    sys.exit(0)
