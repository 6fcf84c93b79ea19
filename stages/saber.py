"""DVC entry point of the 'saber' stage: `python stages/saber.py --name <name>` (= `recipematch saber`)."""

from recipematch.pipeline.saber import main

if __name__ == "__main__":
    main()
