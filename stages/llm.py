"""DVC entry point for the 'llm' stage: `python stages/llm.py [options]` = `recipematch llm`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["llm", *sys.argv[1:]])
