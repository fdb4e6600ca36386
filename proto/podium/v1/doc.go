// Package podiumv1 is Podium's wire API, generated from the .proto files
// beside it (`make proto`): the node protocol agents speak (NodeService), the
// task API people and programs use (TaskService) and the operators' API
// (AdminService). Both the agent and the coordinator import it and nothing
// else of each other, so it is the one contract between them. redact.go is
// hand-written: it keeps secrets in a spec out of every log line.
package podiumv1
