"""`python -m shardwise ...` (what `torchrun -m shardwise measure ...` runs on every rank)."""

from shardwise.cli import main

if __name__ == "__main__":
    main()
