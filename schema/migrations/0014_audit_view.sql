-- audit_recent is the audit log as an admin reads it in psql: the last 30
-- days, newest first, with each call's service dropped from its name when it
-- is the task or admin API ("Cancel", "SetSecret"). The table keeps
-- everything; this view only saves typing.
create view podium.audit_recent as
select at, who, role, transport,
       regexp_replace(action, '^(TaskService|AdminService)\.', '') as action,
       target, result
from podium.audit_log
where at > now() - interval '30 days'
order by at desc, id desc;
