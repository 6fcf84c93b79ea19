"""DVC entry point of the 'gates' stage: `python stages/gates.py [options]` (= `recipematch gates`)."""

from recipematch.pipeline.gates import main

if __name__ == "__main__":
    main()
