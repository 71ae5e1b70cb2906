"""Running a course on the lab: clean student copies of the notebooks, and answers an instructor collects.

``labs/`` holds the solved notebooks with their stored outputs (what CI validates and
an instructor opens). A student works in their own copy with the outputs cleared, so
no prediction is answered on screen before the student runs the cell; copies are made
once and never overwritten, so a student's work survives ``make lab`` being run again.

    python -m labkit.course copies [--src labs] [--dst my-labs]   # what `make lab` runs first
    python -m labkit.course release DIR | collect DIR | key | update

The top of the teaching layer: ``copies`` (versioned student copies), ``release`` (a student
distribution, without the instructor's modules), ``collect`` with ``regrade``, ``gradebook``,
``similarity`` and ``sandbox`` (a class's hand-ins re-graded into class.csv, items.csv, flags.csv and
similarity.csv), ``key`` (the answer key), ``guide`` (notebook 00's tables), ``__main__`` (the command line).
The answers a student gives are kept by :mod:`labkit.teach.journal`, below every check that
records them, and handed in through :mod:`labkit.teach.handin`.
"""
