from leverctl.cli.app import main

main()
