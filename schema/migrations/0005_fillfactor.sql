-- Room on every page for a row's next version. Most updates of a task (its log
-- position, its reason), an attempt (its acked seq) and a node (its heartbeat)
-- change no indexed column, and Postgres can then write the new version on the
-- same page without touching any index (a HOT update) — but only if the page
-- has space. A busy replica updates each task several times in its life.
alter table podium.tasks set (fillfactor = 70);
alter table podium.attempts set (fillfactor = 70);
alter table podium.nodes set (fillfactor = 50);
