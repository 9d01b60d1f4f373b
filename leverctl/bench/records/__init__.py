"""Result records (docs/records.md): their schema, rules, files and columns.

    schema.py   the record's fields (types, required, how read and held) and timing figures, listed once;
                the file names and document schemas
    rules.py    each rule once: identity, the check of a record read, where it ran and whether its
                timing is usable, and the figures a report takes from a timing
    decode.py   msgspec: a result line into the fields the reports read (made from the schema), plan items
    made.py     Made, a sequence whose elements are made as they are asked for
    columns.py  records and plan items as numpy columns; one record per identity (distinct)
    plans.py    plan.json read (the header alone, or its items) and written
    read.py     the reader: a results file, sweep directory or bench document, always as columns
                (ResultSet); a record whole again from its line
    stream.py   a bench document's results list cut into record texts a piece at a time
    write.py    results.jsonl appended a durable line at a time; a partial last line cut
    merge.py    the shards of one sweep joined, and the merged directory written

Nothing here imports the kernels, numba or the device code; ``schema``,
``rules`` and ``decode`` import no numpy either. The package imports no
module of its own here: callers import the module they need.
"""
