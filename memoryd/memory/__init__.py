"""Domain logic: plain modules over a SQLAlchemy session or the store."""
