"""DVC entry point of the 'audit' stage: `python stages/audit.py` (= `recipematch audit-report`)."""

from recipematch.pipeline.audit import main

if __name__ == "__main__":
    main()
