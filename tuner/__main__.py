from tuner.cli.app import main

main()
