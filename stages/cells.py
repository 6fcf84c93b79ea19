"""DVC entry point of the 'cells' stage: `python stages/cells.py [options]` (= `recipematch cells`)."""

from recipematch.pipeline.cells import main

if __name__ == "__main__":
    main()
