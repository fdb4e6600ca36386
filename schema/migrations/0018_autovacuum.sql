-- The tables that churn get vacuumed as they churn.
--
-- Every task's events are inserted and, minutes later, deleted by the log
-- archive (0015_log_archive.sql); every task row is deleted by retention
-- (0016_retention.sql) once it is past its keep. A delete frees heap space
-- only once a VACUUM has recorded it; until then new rows go to new pages and
-- the table grows although its row count is level. Autovacuum's defaults wait
-- for 20 % of a table to be dead (autovacuum_vacuum_scale_factor 0.2): on a
-- table of a million events that is 200,000 dead rows between vacuums, and
-- the table keeps growing by that much again and again as it churns.
--
-- Here a vacuum starts once 2 % of the table, or 10,000 rows, is dead, and
-- runs without the default cost delay's pauses, so it keeps pace with a fleet
-- storing hundreds of tasks a second. These are per-table storage parameters:
-- an operator can still change them (alter table ... set / reset), and they
-- take no lock that blocks reads or writes.
alter table podium.task_events set (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

alter table podium.tasks set (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

alter table podium.attempts set (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);

-- Without an object store the archive is a row here, deleted by retention.
alter table podium.task_log_archives set (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
