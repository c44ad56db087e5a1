"""Hand-made nbgrader assignments and hostile submissions for the grading tests."""
