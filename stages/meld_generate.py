"""DVC entry point of the 'meld_generate' stage: `python stages/meld_generate.py --name <name>` (= `recipematch meld-generate`)."""

from recipematch.pipeline.meld_generate import main

if __name__ == "__main__":
    main()
