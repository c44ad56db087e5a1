"""nbgrader configuration of the Simplified Chinese edition (简体中文版): this folder is its course root.

It is the English course's configuration (../nbgrader_config.py) with its own root, course id
and exchange, so a Chinese class has its own gradebook (zh-CN/gradebook.db), its own
source/ (built by `autograder translate zh-CN`) and release/ (`autograder release --course zh-CN`).
Run nbgrader's commands from this folder.
"""

import os

c = get_config()  # noqa: F821 -- injected by traitlets when nbgrader loads this file
load_subconfig(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",  # noqa: F821
                            "nbgrader_config.py"))

HERE = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = HERE
c.CourseDirectory.course_id = "leaf-tensors-zh-CN"
if not os.environ.get("NBGRADER_DB_URL"):
    c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")
EXCHANGE = os.environ.get("NBGRADER_EXCHANGE", os.path.join(HERE, "exchange"))
os.makedirs(EXCHANGE, exist_ok=True)
c.Exchange.root = EXCHANGE
