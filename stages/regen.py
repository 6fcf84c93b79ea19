"""DVC entry point of the 'regen' stage: `python stages/regen.py --name NAME [options]` (= `recipematch regen`)."""

from recipematch.pipeline.regen import main

if __name__ == "__main__":
    main()
