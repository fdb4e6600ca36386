package access_test

import (
	"testing"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// The table's shape: reading needs viewer, changing tasks member, the rest
// admin, and a call nobody put in the table (a service added later) admin.
func TestNeeds(t *testing.T) {
	for proc, want := range map[string]access.Role{
		podiumv1connect.TaskServiceListProcedure:                   access.Viewer,
		podiumv1connect.TaskServiceEventsProcedure:                 access.Viewer,
		podiumv1connect.TaskServiceSubmitProcedure:                 access.Member,
		podiumv1connect.TaskServiceCancelProcedure:                 access.Member,
		podiumv1connect.AdminServiceRekeyNodeProcedure:             access.Admin,
		podiumv1connect.AdminServiceCreateEnrollmentTokenProcedure: access.Admin,
		podiumv1connect.AdminServiceAddUserProcedure:               access.Admin,
		"/podium.v1.AdminService/SetSecret":                        access.Admin,
		// Members list the secrets they may use; who may use one is the
		// admins' to change.
		podiumv1connect.AdminServiceListSecretsProcedure:  access.Member,
		podiumv1connect.AdminServiceGrantSecretProcedure:  access.Admin,
		podiumv1connect.AdminServiceRevokeSecretProcedure: access.Admin,
	} {
		if got := access.Need(proc); got != want {
			t.Errorf("Need(%s) = %q, want %q", proc, got, want)
		}
	}
	if access.Mutating(podiumv1connect.AdminServiceListSecretsProcedure) ||
		!access.Mutating(podiumv1connect.AdminServiceGrantSecretProcedure) || !access.Mutating(podiumv1connect.AdminServiceRevokeSecretProcedure) {
		t.Error("ListSecrets must be read-only and GrantSecret, RevokeSecret audited")
	}
	viewer := tailnet.Caller{Kind: tailnet.KindUser, Login: "vic", Role: "viewer"}
	if err := access.Check(viewer, podiumv1connect.TaskServiceGetProcedure); err != nil {
		t.Errorf("a viewer's Get: %v", err)
	}
	if err := access.Check(viewer, "/podium.v1.AdminService/SetSecret"); err == nil {
		t.Error("a viewer may call a procedure the table does not know")
	}
	node := tailnet.Caller{Kind: tailnet.KindNode, Device: "n1"}
	if err := access.Check(node, podiumv1connect.TaskServiceListProcedure); err == nil {
		t.Error("a node may list tasks")
	}
	if err := access.Check(node, podiumv1connect.AdminServiceWhoAmIProcedure); err != nil {
		t.Errorf("a node's WhoAmI: %v", err)
	}
	if err := access.Check(tailnet.Caller{Kind: tailnet.KindUser, Login: "x", Role: "root"}, podiumv1connect.TaskServiceGetProcedure); err == nil {
		t.Error("an unknown role covers a viewer's call")
	}
}
