"""Process memory on the CPU: the C library's allocator, giving its free pages back, and meters
of live heap bytes and of the resident set. No stage of the pipeline; any package may use it."""
