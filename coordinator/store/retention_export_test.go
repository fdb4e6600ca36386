package store

// RetentionSQL is the retention job's statements, for the test that checks
// each can use its index.
var RetentionSQL = map[string]string{
	"tasks": expireTasksSQL, "logs": expireLogsSQL, "artifacts": expireArtifactsSQL, "tokens": expireTokensSQL,
	"commands": expireCommandsSQL, "audit": expireAuditSQL, "tombstones": expireTombstonesSQL,
}

// DeleteArchivedEventsSQL is the archive job's deletion of archived rows, for
// the test that checks it uses task_events' primary key.
const DeleteArchivedEventsSQL = deleteArchivedEventsSQL
