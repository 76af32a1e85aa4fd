"""On-disk formats of agentscope's line-delimited capture files (docs/file-formats.md).

Each module here turns one kind of record into one line and back, validating as it reads.
Writers (agentscope.capture, agentscope.collectors) and readers (agentscope.store) both go
through these modules, so the format is defined in exactly one place; so are the files'
names (``spanfile.file_name``, ``samplefile.file_name``, :mod:`.naming`).
"""
