"""DVC entry point for the 'recordings' stage: `python stages/recordings.py [options]` = `recipematch recordings`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["recordings", *sys.argv[1:]])
