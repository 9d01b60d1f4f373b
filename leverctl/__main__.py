from leverctl.cli.entry import main

main()
