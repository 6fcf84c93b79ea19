"""DVC entry point of the 'specs' stage: `python stages/specs.py [options]` (= `recipematch specs`)."""

from recipematch.pipeline.specs import main

if __name__ == "__main__":
    main()
