"""`python -m shardwise` runs the command line."""

from shardwise.cli import main

main()
