-- Archived logs kept in Postgres are read in pages (substring of the value
-- in fixed windows, store.LogArchivePage), so a coordinator holds one page of
-- an archive of any size. The value is already zstd-compressed; with the
-- default storage (extended) Postgres would also try to compress it and must
-- then decompress all of it to cut out any window. External storage keeps it
-- uncompressed out of line, where a substring reads only the chunks it
-- covers. It applies to values written from now on; older ones read the same,
-- only less cheaply. Additive and forward-only.
alter table podium.task_log_archives alter column data set storage external;
