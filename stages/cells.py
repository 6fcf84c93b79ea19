"""DVC entry point for the 'cells' stage: `python stages/cells.py [options]` = `recipematch cells`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["cells", *sys.argv[1:]])
