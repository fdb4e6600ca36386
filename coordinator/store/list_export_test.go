package store

// ListTasksSQL is ListTasks' statement for a filter, for the test that
// explains each at a million rows.
func ListTasksSQL(f TaskFilter) (string, []any) { return listTasksSQL(f) }
