// Package access decides what a caller of the task and admin APIs may do:
// its role, and the one table of which call needs which role. Who the
// caller is was decided before (the bearer token on the local transport,
// Tailscale's WhoIs on the tailnet); this package turns that into a role and
// refuses a call the role does not cover, with an error that says which role
// is needed and how to get it. Nodes are not people: they use NodeService,
// whose own checks (the node key, the device binding) are elsewhere.
package access

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// Role is what a person may do.
type Role string

const (
	// Viewer reads: tasks, their logs and artifacts.
	Viewer Role = "viewer"
	// Member also submits tasks, and cancels and messages their own.
	Member Role = "member"
	// Admin does everything: nodes, enrollment and rekey tokens, people,
	// secrets, anyone's task.
	Admin Role = "admin"
	// none is what a call needs that every identified caller may make,
	// nodes included (WhoAmI).
	none Role = ""
)

var rank = map[Role]int{none: 0, Viewer: 1, Member: 2, Admin: 3}

// ParseRole checks a role's name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case Admin, Member, Viewer:
		return r, nil
	}
	return "", fmt.Errorf("%q is not a role: want admin, member or viewer", s)
}

// Covers reports whether r may make a call that needs need.
func (r Role) Covers(need Role) bool {
	_, known := rank[r]
	return known && rank[r] >= rank[need]
}

// Needs is the one table of which call needs which role. A procedure not in
// it needs Admin, so a call added later is closed until someone decides
// otherwise here (the secrets and registries calls are admin-only that way).
var Needs = map[string]Role{
	podiumv1connect.AdminServiceWhoAmIProcedure: none,

	podiumv1connect.TaskServiceGetProcedure:              Viewer,
	podiumv1connect.TaskServiceListProcedure:             Viewer,
	podiumv1connect.TaskServiceEventsProcedure:           Viewer,
	podiumv1connect.TaskServiceListArtifactsProcedure:    Viewer,
	podiumv1connect.TaskServiceDownloadArtifactProcedure: Viewer,
	podiumv1connect.TaskServiceArtifactURLProcedure:      Viewer,

	// Members cancel and message only their own tasks: the task service
	// checks the owner (Owns), since the table cannot see the task.
	podiumv1connect.TaskServiceSubmitProcedure: Member,
	podiumv1connect.TaskServiceCancelProcedure: Member,
	podiumv1connect.TaskServiceSendProcedure:   Member,
	// A member reruns only their own tasks, as they cancel them: a rerun
	// runs the old task's spec (env values a non-owner may not even read)
	// under the caller's name.
	podiumv1connect.TaskServiceRerunProcedure: Member,

	// Schedules submit tasks, so making and changing them needs what
	// submitting does; the service checks that members touch only their own.
	podiumv1connect.ScheduleServiceCreateProcedure: Member,
	podiumv1connect.ScheduleServiceListProcedure:   Member,
	podiumv1connect.ScheduleServiceGetProcedure:    Member,
	podiumv1connect.ScheduleServicePauseProcedure:  Member,
	podiumv1connect.ScheduleServiceResumeProcedure: Member,
	podiumv1connect.ScheduleServiceRemoveProcedure: Member,
	podiumv1connect.ScheduleServiceRunNowProcedure: Member,

	// A member lists the secrets they may use (the service leaves out the
	// rest, and every secret's grants); setting, granting, revoking and
	// deleting stay admin-only by being absent here.
	podiumv1connect.AdminServiceListSecretsProcedure: Member,
	// Everyone who may read tasks may read the fleet they run on, as the
	// console's nodes page shows it to them; the service leaves out what
	// only admins see (tailnet devices, replicas, who set a label).
	podiumv1connect.AdminServiceListNodesProcedure: Viewer,

	// Everyone rotates their own token; the service checks that only an
	// admin names another person.
	podiumv1connect.AdminServiceRotateUserTokenProcedure: Viewer,

	podiumv1connect.AdminServiceCreateEnrollmentTokenProcedure: Admin,
	podiumv1connect.AdminServiceDrainNodeProcedure:             Admin,
	podiumv1connect.AdminServiceSetNodeSlotsProcedure:          Admin,
	podiumv1connect.AdminServiceSetNodeLabelsProcedure:         Admin,
	podiumv1connect.AdminServiceRemoveNodeProcedure:            Admin,
	podiumv1connect.AdminServiceRekeyNodeProcedure:             Admin,
	podiumv1connect.AdminServiceAddUserProcedure:               Admin,
	podiumv1connect.AdminServiceListUsersProcedure:             Admin,
	podiumv1connect.AdminServiceRemoveUserProcedure:            Admin,
	podiumv1connect.AdminServiceSetUserRoleProcedure:           Admin,
	podiumv1connect.AdminServiceSetUserWeightProcedure:         Admin,
	podiumv1connect.AdminServiceListAuditProcedure:             Admin,
	podiumv1connect.AdminServiceSetSecretProcedure:             Admin,
	podiumv1connect.AdminServiceDeleteSecretProcedure:          Admin,
	podiumv1connect.AdminServiceRegistryLoginProcedure:         Admin,
	podiumv1connect.AdminServiceListRegistriesProcedure:        Admin,
	podiumv1connect.AdminServiceRemoveRegistryProcedure:        Admin,
	podiumv1connect.AdminServiceSetGroupWeightProcedure:        Admin,
	podiumv1connect.AdminServiceListGroupsProcedure:            Admin,
	// Webhooks receive every task's end and its user and labels.
	podiumv1connect.WebhookServiceAddProcedure:       Admin,
	podiumv1connect.WebhookServiceListProcedure:      Admin,
	podiumv1connect.WebhookServiceRemoveProcedure:    Admin,
	podiumv1connect.WebhookServiceTestProcedure:      Admin,
	podiumv1connect.WebhookServiceRedeliverProcedure: Admin,
}

// readOnly are the calls that change nothing; every other call is written
// to the audit log (a call added later too, until it is listed here).
var readOnly = map[string]bool{
	podiumv1connect.AdminServiceWhoAmIProcedure:          true,
	podiumv1connect.TaskServiceGetProcedure:              true,
	podiumv1connect.TaskServiceListProcedure:             true,
	podiumv1connect.TaskServiceEventsProcedure:           true,
	podiumv1connect.TaskServiceListArtifactsProcedure:    true,
	podiumv1connect.TaskServiceDownloadArtifactProcedure: true,
	podiumv1connect.TaskServiceArtifactURLProcedure:      true,
	podiumv1connect.AdminServiceListNodesProcedure:       true,
	podiumv1connect.AdminServiceListUsersProcedure:       true,
	podiumv1connect.AdminServiceListAuditProcedure:       true,
	podiumv1connect.AdminServiceListSecretsProcedure:     true,
	podiumv1connect.AdminServiceListRegistriesProcedure:  true,
	podiumv1connect.AdminServiceListGroupsProcedure:      true,
	podiumv1connect.ScheduleServiceListProcedure:         true,
	podiumv1connect.ScheduleServiceGetProcedure:          true,
	podiumv1connect.WebhookServiceListProcedure:          true,
}

// Mutating reports whether procedure changes something, and so is audited.
func Mutating(procedure string) bool { return !readOnly[procedure] }

// Action names a procedure in the audit log, as a person would:
// "TaskService.Cancel".
func Action(procedure string) string { return short(procedure) }

// Need is the role procedure needs.
func Need(procedure string) Role {
	if r, ok := Needs[procedure]; ok {
		return r
	}
	return Admin
}

// Caller is the caller the server identified, with its role.
func Caller(ctx context.Context) (tailnet.Caller, bool) { return tailnet.CallerFrom(ctx) }

// IsAdmin reports whether the caller in ctx is an admin.
func IsAdmin(ctx context.Context) bool {
	c, ok := tailnet.CallerFrom(ctx)
	return ok && Role(c.Role) == Admin
}

// Owns reports whether the caller in ctx may act on a task requestedBy
// submitted: an admin on any, anyone else on their own.
func Owns(ctx context.Context, requestedBy string) bool {
	c, ok := tailnet.CallerFrom(ctx)
	if !ok {
		return false
	}
	return Role(c.Role) == Admin || (requestedBy != "" && c.Name() == requestedBy)
}

// NotOwner is the error for a member acting on someone else's task.
func NotOwner(what, taskID, owner string) error {
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"task %s is %s's: members may %s only their own tasks; ask %s or an admin", taskID, owner, what, owner))
}

// MaxNameBytes bounds a user's name (a Tailscale login fits).
const MaxNameBytes = 128

var (
	plainName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	loginName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*@[A-Za-z0-9][A-Za-z0-9.-]*$`)
)

// CheckName validates a user's name: a plain name (a-z, 0-9, '.', '_', '-';
// at most 64 bytes, starting with a letter or digit) or a Tailscale login
// (name@domain, at most MaxNameBytes).
func CheckName(name string) error {
	if len(name) > MaxNameBytes {
		return fmt.Errorf("name: %d bytes is more than %d", len(name), MaxNameBytes)
	}
	if plainName.MatchString(name) || loginName.MatchString(name) {
		return nil
	}
	return fmt.Errorf("name: %q is neither a user name (a-z, 0-9, '.', '_', '-', at most 64) nor a login (name@example.com)", name)
}

// ReservedNames are the names the coordinator gives its own callers
// (tailnet.Caller.Name): "token" is the bootstrap token's, recorded as
// requested_by on what it submits. A user by such a name would own the
// bootstrap token's tasks and schedules, so none may be added
// (store.ReservedUserNames is the same list, for the lookups that ignore a
// row left from before).
var ReservedNames = []string{string(tailnet.KindToken)}

// Reserved refuses a name the coordinator keeps for its own callers.
func Reserved(name string) error {
	if slices.Contains(ReservedNames, name) {
		return fmt.Errorf("name: %q is reserved: it is how the coordinator names its bootstrap token, whose tasks it owns; "+
			"give the person another name (their login, e.g. %s@example.com, or %s-1)", name, name, name)
	}
	return nil
}

// Users is what access reads of the people the coordinator knows.
type Users interface {
	// UserRole returns the role of the user called name, ok false when
	// there is none.
	UserRole(ctx context.Context, name string) (role string, ok bool, err error)
	// DeviceNode returns the node bound to a Tailscale device, "" if none.
	DeviceNode(ctx context.Context, deviceID string) (string, error)
}

// Resolver gives tailnet people their role.
type Resolver struct {
	Users Users
	// DefaultRole is given to a tailnet person with neither a grant nor a
	// user row; empty refuses them.
	DefaultRole Role
	// AllowUntaggedNodes is the coordinator's --allow-untagged-nodes: an
	// untagged device may then be a node, and a device that is one is not
	// its owner on the people API (see Resolve).
	AllowUntaggedNodes bool
}

// ErrNoRole means a person has no role.
var ErrNoRole = errors.New("no Podium role")

// Resolve settles c's role. The local transport's callers arrive with it
// (the bootstrap token is admin, a personal token its user's role); a
// tailnet person's comes from the tailnet policy's grant (the highest role
// granted under tailnet.CapName), else from a user row with their login,
// else DefaultRole. A node has no role.
//
// With --allow-untagged-nodes a person's device may also be enrolled as a
// node. Calls from such a device could come from any task running on it, so
// they are not the person's: the people API refuses them and says so.
func (r *Resolver) Resolve(ctx context.Context, c tailnet.Caller) (tailnet.Caller, error) {
	if c.Kind != tailnet.KindPerson || c.Role != "" {
		return c, nil
	}
	if r.AllowUntaggedNodes && c.DeviceID != "" {
		node, err := r.Users.DeviceNode(ctx, c.DeviceID)
		if err != nil {
			return c, connect.NewError(connect.CodeUnavailable, err)
		}
		if node != "" {
			return c, connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
				"device %s is enrolled as node %s, so anything running on it (other people's tasks too) calls from it: "+
					"it is a node, not %s; use Podium from another device, or tag this one and sign in elsewhere", c.Device, node, c.Login))
		}
	}
	best := none
	for _, g := range c.Granted {
		if role, err := ParseRole(g); err == nil && rank[role] > rank[best] {
			best = role
		}
	}
	if best != none {
		c.Role, c.RoleFrom = string(best), "tailnet grant"
		return c, nil
	}
	role, ok, err := r.Users.UserRole(ctx, c.Login)
	if err != nil {
		return c, connect.NewError(connect.CodeUnavailable, err)
	}
	if ok {
		c.Role, c.RoleFrom = role, "user"
		return c, nil
	}
	if r.DefaultRole != none {
		c.Role, c.RoleFrom = string(r.DefaultRole), "default"
		return c, nil
	}
	return c, connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"%w: %s has no role; an admin can grant one in the tailnet policy (app capability %q, e.g. [{\"role\": \"member\"}]) "+
			"or run `podium user add %s --role member`", ErrNoRole, c.Login, tailnet.CapName, c.Login))
}

// Check refuses a call the caller's role does not cover.
func Check(c tailnet.Caller, procedure string) error {
	need := Need(procedure)
	if need == none {
		return nil
	}
	if c.Kind == tailnet.KindNode {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is a node: nodes may use only the node API", c.Name()))
	}
	if Role(c.Role).Covers(need) {
		return nil
	}
	// Administering the fleet is asked of an admin, not become one: a member
	// told to make themselves admin is pointed at the wrong fix.
	how := "ask an admin to do it"
	if need != Admin {
		how = "an admin can change it with `podium user set-role " + c.Name() + " " + string(need) + "`"
		if c.Kind == tailnet.KindPerson {
			how += fmt.Sprintf(" or grant it in the tailnet policy (app capability %q)", tailnet.CapName)
		}
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"%s needs the %s role; %s is %s: %s", short(procedure), need, c.Name(), article(c.Role), how))
}

func article(role string) string {
	if role == "" {
		return "without a role"
	}
	if role == string(Admin) {
		return "an admin"
	}
	return "a " + role
}

// short names a procedure as a person would: "TaskService.Cancel".
func short(procedure string) string {
	return strings.Replace(strings.TrimPrefix(procedure, "/podium.v1."), "/", ".", 1)
}

// Interceptor settles the role of the caller the transport's guard put in
// the context and refuses what the role does not cover. It goes after the
// guard and before the handler, on the task and admin services.
func Interceptor(r *Resolver) connect.Interceptor { return &interceptor{r: r} }

type interceptor struct{ r *Resolver }

func (i *interceptor) check(ctx context.Context, procedure string) (context.Context, error) {
	c, ok := tailnet.CallerFrom(ctx)
	if !ok {
		return ctx, connect.NewError(connect.CodeUnauthenticated, errors.New("the caller was not identified"))
	}
	resolved, err := i.r.Resolve(ctx, c)
	switch {
	case err == nil:
		c = resolved
	case errors.Is(err, ErrNoRole) && Need(procedure) == none:
		// WhoAmI answers a person without a role too: it is how they
		// find out what to ask an admin for.
	default:
		return ctx, err
	}
	if err := Check(c, procedure); err != nil {
		return ctx, err
	}
	return tailnet.WithCaller(ctx, c), nil
}

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := i.check(ctx, req.Spec().Procedure)
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.check(ctx, conn.Spec().Procedure)
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
