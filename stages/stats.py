"""DVC entry point for the 'stats' stage: `python stages/stats.py [options]` = `recipematch stats`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["stats", *sys.argv[1:]])
