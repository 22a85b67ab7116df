"""`python -m shardwise.presets`: rewrite presets.json from the preset YAML files."""

from shardwise.presets import write_snapshot

if __name__ == "__main__":
    print(f"wrote {write_snapshot()}")
