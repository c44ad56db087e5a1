"""Grading a whole class: parallel, sandboxed autograding into the nbgrader gradebook.

    autograder grade ASSIGNMENT [--workers N] [--student ID ...] [--timeout S] ...

``cli`` (the command), ``engine`` (nbgrader's Autograde converter with execution handed to
workers), ``execute`` (nbgrader's Execute preprocessor, robust to dying kernels),
``sandbox`` (the workers: namespaces, unprivileged uid, resource limits), ``zygote`` (the
worker process: imports torch once, forks a fresh kernel per submission), ``nsinit`` (the
mounts inside a worker's namespace), ``report`` (outcomes, summary, JSON/CSV report).
See docs/grading.md.
"""
