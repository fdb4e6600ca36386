-- Retries and reruns (spec.retry, podium task rerun).
--
-- not_before is set on a task that failed an attempt its retry policy
-- retries: it waits queued until then, and the scheduler does not place it
-- before (the wait lives in this row, not in a goroutine, so it survives a
-- leader change and a cancel ends it like any queued task's). The leader's
-- sweep clears it once passed and rings the scheduler; any other transition
-- clears it too, so the index below holds only the tasks in a backoff now.
alter table podium.tasks add column not_before timestamptz;
create index tasks_backoff on podium.tasks (not_before) where not_before is not null;

-- rerun_of is the task a rerun copied (TaskService.Rerun). No foreign key:
-- the old task may expire by retention long before the new one, and the
-- link should say what it was a rerun of even then.
alter table podium.tasks add column rerun_of text;
