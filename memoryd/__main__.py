import os
import sys

if not __package__:
    # Run as a file: Celery re-executes ``sys.argv`` when a worker gets SIGHUP, and then
    # this package's directory heads sys.path, where memoryd/logging.py would shadow the
    # standard library's logging.
    _here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _here]

from memoryd.cli import main

sys.exit(main())
