"""Domain logic: plain modules over a SQLAlchemy session or the store (storing,
recall, embeddings, the LLM, sessions, erasure). Imports the base modules, ``db`` and
``embedded``; never its ``maintenance`` subpackage, tasks, workers or the front doors,
which stand on it."""
