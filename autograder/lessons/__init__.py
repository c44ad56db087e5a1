"""One module per assignment: ``l<assignment id>.py`` defines ``lesson`` and its questions.

The oracle finds ``01_leaves`` at ``autograder.lessons.l01_leaves``.
"""
