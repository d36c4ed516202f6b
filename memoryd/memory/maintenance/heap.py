"""Walking ``memories`` in physical order, a window of pages at a time.

Fleet-wide sweeps over unindexed conditions (eviction's age and confidence steps,
consolidate's decay pass) read the table as a sequential scan would, piecewise: a
keyset walk over the primary key would read the pages at random instead.
"""

from __future__ import annotations

import math

from sqlalchemy import text

from memoryd.memory.maintenance.context import JobContext

# A heap walk's window holds about this many batches' worth of rows.
WINDOW_BATCHES = 4
# A heap walk's window is never smaller than this many pages (8 MB): a smaller table
# is one window, walked in plain id order.
HEAP_WINDOW_MIN_PAGES = 1024


def heap_window(ctx: JobContext, batches: int = WINDOW_BATCHES) -> tuple[int, int]:
    """(pages of memories now, pages per window of a heap walk, holding about ``batches``
    batches of rows)."""
    with ctx.store.session() as session:
        pages, per_page = session.execute(text("""
            SELECT pg_relation_size('memories') / current_setting('block_size')::int,
                   CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages END
            FROM pg_class WHERE oid = 'memories'::regclass""")).one()
    return int(pages), max(HEAP_WINDOW_MIN_PAGES,
                           math.ceil(batches * ctx.batch_size / float(per_page or 4)))
