"""``attention.dflash_contig``: the DFlash draft block's attention; declared in ``spec``."""
