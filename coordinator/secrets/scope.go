package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A secret's scope: who may use it. Admins use every secret; anyone else
// uses a secret only when it is granted to one of the principals they are
// (store.GrantSecret): their own name, "group:NAME" for each group their
// user row lists, and "role:member" while they are a member. A secret
// granted to nobody is admins' alone.
//
// Authorize is the one check. It runs wherever a secret is reached on
// someone's behalf: at submit and rerun (the caller), at every schedule tick
// and run-now (the schedule's owner), when an assignment is built (the
// task's owner: a grant revoked while the task waited fails it there), and
// when a task's notify entry is signed (the task's owner).

const (
	// RoleMember is the principal every member is.
	RoleMember = "role:member"
	// GroupPrefix starts a group principal: group:NAME.
	GroupPrefix = "group:"
	rolePrefix  = "role:"
)

// MaxPrincipals bounds the principals one call grants or revokes.
const MaxPrincipals = 64

// CheckPrincipal says what is wrong with a principal, or nil: a user's name
// (access.CheckName: alice, or a tailnet login alice@example.com),
// group:NAME (a group as a spec's group names it) or role:member.
func CheckPrincipal(p string) error {
	switch {
	case p == RoleMember:
		return nil
	case p == rolePrefix+string(access.Admin):
		return errors.New("role:admin: admins may use every secret already; grant role:member, a group:NAME or a user's name")
	case p == rolePrefix+string(access.Viewer):
		return errors.New("role:viewer: viewers cannot submit tasks, so a secret granted to them would never be used; grant role:member, a group:NAME or a user's name")
	case strings.HasPrefix(p, rolePrefix):
		return fmt.Errorf("%s: the only role a secret is granted to is role:member (admins use every secret already)", clip(p))
	case strings.HasPrefix(p, GroupPrefix):
		g := strings.TrimPrefix(p, GroupPrefix)
		if !taskspec.ValidGroup(g) {
			return fmt.Errorf("%s: %q is not a group name: use letters, digits and . _ / -, at most %d bytes, as a spec's group", clip(p), clip(g), taskspec.MaxGroupBytes)
		}
		return nil
	}
	if err := access.CheckName(p); err != nil {
		return fmt.Errorf("%s is not a principal: want a user's name (alice, alice@example.com), group:NAME or role:member (%w)", clip(p), err)
	}
	return nil
}

// CheckPrincipals validates principals (at least one, at most
// MaxPrincipals) and returns them without duplicates, in the order given.
func CheckPrincipals(ps []string) ([]string, error) {
	if len(ps) == 0 {
		return nil, errors.New("principals: name at least one: a user's name (alice, alice@example.com), group:NAME or role:member")
	}
	if len(ps) > MaxPrincipals {
		return nil, fmt.Errorf("principals: %d is more than %d in one call; grant a group (group:NAME) or role:member instead", len(ps), MaxPrincipals)
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if err := CheckPrincipal(p); err != nil {
			return nil, err
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Standing is whom the check takes an owner for.
type Standing struct {
	Name string
	// Role is admin, member or viewer.
	Role string
	// Groups are the groups of the owner's user row.
	Groups []string
}

// bootstrapName is what the bootstrap API token's tasks are requested by.
var bootstrapName = string(tailnet.KindToken)

// StandingOf decides the role and groups owner has for using secrets, from
// what the coordinator keeps, since the check also runs when the owner is
// not calling (a schedule's tick, an assignment):
//
//   - a user row (podium user add): its current role and groups, so a
//     demotion or removal takes effect at the next check;
//   - no row, and the name "token": the bootstrap API token, an admin;
//   - no row otherwise: a member with no groups. That is a tailnet person
//     whose role came from the tailnet policy (or the default role) at the
//     call; the policy cannot be read without their call, and nothing about
//     it is stored, so the safe reading is the least role that submits. Such
//     a person uses the secrets granted to their login or to role:member;
//     to use every secret as an admin, an admin adds them as a user
//     (`podium user add alice@example.com --role admin`). The same reading
//     applies at submit, so a task is never accepted that its assignment
//     would then refuse.
//
// "token" is a reserved user name: the store ignores a row of that name
// left from before the reservation (it cannot sign in either), so such a
// row never changes what the bootstrap token's tasks may use.
func StandingOf(ctx context.Context, st *store.Store, owner string) (Standing, error) {
	u, err := st.UserByName(ctx, owner)
	switch {
	case err == nil:
		return Standing{Name: owner, Role: u.Role, Groups: u.Groups}, nil
	case !errors.Is(err, store.ErrNotFound):
		return Standing{}, err
	case owner == bootstrapName:
		return Standing{Name: owner, Role: string(access.Admin)}, nil
	case !store.IsLogin(owner):
		// A local user with no row was removed: no role, no secret.
		return Standing{Name: owner}, nil
	}
	return Standing{Name: owner, Role: string(access.Member)}, nil
}

// principals are the grants that reach s.
func (s Standing) principals() []string {
	if s.Role != string(access.Member) {
		return nil
	}
	out := make([]string, 0, len(s.Groups)+2)
	if s.Name != "" {
		out = append(out, s.Name)
	}
	for _, g := range s.Groups {
		out = append(out, GroupPrefix+g)
	}
	return append(out, RoleMember)
}

// DeniedError names the secrets an owner may not use. To anyone but an
// admin, a secret that does not exist reads the same as one not granted to
// them: whether a name is stored is for admins to see (podium secret ls).
type DeniedError struct {
	Who, Role string
	Names     []string
	// Hint says more about the caller, when there is more to say.
	Hint string
}

func (e *DeniedError) Error() string {
	what := "secret " + e.Names[0]
	if len(e.Names) > 1 {
		what = "secrets " + strings.Join(e.Names, ", ")
	}
	var msg string
	switch {
	case e.Who == "":
		msg = fmt.Sprintf("a task with no owner may not use %s: only a person can be granted a secret; submit it again as yourself", what)
	case e.Role == "":
		msg = fmt.Sprintf("%s may not use %s: %s is no longer a Podium user, and only users are granted secrets; an admin adds them again with `podium user add %s`",
			e.Who, what, e.Who, e.Who)
	case e.Role == string(access.Viewer):
		msg = fmt.Sprintf("%s may not use %s: %s is a viewer, and viewers use no secret; ask an admin: `podium user set-role %s member`, then `podium secret grant %s %s`",
			e.Who, what, e.Who, e.Who, e.Names[0], e.Who)
	default:
		how := make([]string, len(e.Names))
		for i, n := range e.Names {
			how[i] = fmt.Sprintf("`podium secret grant %s %s`", n, e.Who)
		}
		msg = fmt.Sprintf("%s may not use %s: a secret is used only by admins and by those an admin granted it to (and, to anyone else, a name no secret has reads the same); ask an admin: %s",
			e.Who, what, strings.Join(how, ", "))
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// Authorize checks that owner may use every one of names, and that they
// exist: nil when so; a *DeniedError naming those owner may not use (for
// an owner who is not an admin, a missing secret among them); a
// *MissingError naming those not stored (for an admin). It returns the
// standing it decided (StandingOf).
func Authorize(ctx context.Context, st *store.Store, owner string, names []string) (Standing, error) {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	sd, err := StandingOf(ctx, st, owner)
	if err != nil || len(names) == 0 {
		return sd, err
	}
	if sd.Role == string(access.Admin) {
		missing, err := st.MissingSecrets(ctx, names)
		if err != nil {
			return sd, err
		}
		if len(missing) > 0 {
			return sd, &MissingError{Names: missing}
		}
		return sd, nil
	}
	if sd.Name == "" || sd.Role != string(access.Member) {
		return sd, &DeniedError{Who: sd.Name, Role: sd.Role, Names: names}
	}
	// A grant's row exists only while its secret does (the foreign key
	// cascades), so a granted name is a stored one.
	granted, err := st.GrantedSecrets(ctx, sd.principals(), names)
	if err != nil {
		return sd, err
	}
	var denied []string
	for _, n := range names {
		if !slices.Contains(granted, n) {
			denied = append(denied, n)
		}
	}
	if len(denied) > 0 {
		return sd, &DeniedError{Who: sd.Name, Role: sd.Role, Names: denied}
	}
	return sd, nil
}

// Authorize is Authorize over the vault's store.
func (v *Vault) Authorize(ctx context.Context, owner string, names []string) (Standing, error) {
	return Authorize(ctx, v.store, owner, names)
}

// Usable returns the names of the stored secrets owner may use, sorted, and
// whether that is every secret (an admin).
func Usable(ctx context.Context, st *store.Store, owner string) (names []string, all bool, err error) {
	sd, err := StandingOf(ctx, st, owner)
	if err != nil {
		return nil, false, err
	}
	if sd.Role == string(access.Admin) {
		return nil, true, nil
	}
	if sd.Name == "" {
		return nil, false, nil
	}
	names, err = st.GrantedSecrets(ctx, sd.principals(), nil)
	return names, false, err
}

// CallError is err from Authorize as the API answers a caller: the
// secrets a member may not use (PermissionDenied, with how to get them),
// those an admin names that are not stored (FailedPrecondition), or the
// store's trouble (Unavailable). A caller who is an admin by the tailnet
// policy alone is told why that does not reach secrets (see StandingOf).
// The refused call's audit row names the secrets in its target.
func CallError(ctx context.Context, err error) error {
	var denied *DeniedError
	var missing *MissingError
	switch {
	case errors.As(err, &denied):
		if c, ok := tailnet.CallerFrom(ctx); ok && c.Role == string(access.Admin) && denied.Role != string(access.Admin) {
			denied.Hint = fmt.Sprintf("you are an admin by %s, which the coordinator cannot read when the task is assigned or a schedule fires, so secrets go by podium's users: an admin runs `podium user add %s --role admin` (or grants the secret)",
				c.RoleFrom, c.Name())
		}
		if a := store.AuditFrom(ctx); a != nil {
			a.Target = strings.TrimSpace(a.Target + " secret " + strings.Join(denied.Names, ", "))
		}
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("spec.secrets: %w", denied))
	case errors.As(err, &missing):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("spec.secrets: %w", missing))
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// Use is a task's assignment reaching the secrets Authorize allowed it.
type Use struct {
	store  *store.Store
	sd     Standing
	taskID string
	names  []string
}

// AuthorizeTask checks that the owner of taskID may use the secrets refs
// name, as its assignment is built, and returns the Use to record once the
// values are read. A nil Use (no secrets) records nothing.
func (v *Vault) AuthorizeTask(ctx context.Context, taskID string, refs []*podiumv1.SecretRef) (*Use, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	owner, err := v.store.TaskOwner(ctx, taskID)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.GetName()
	}
	sd, err := v.Authorize(ctx, owner, names)
	if err != nil {
		return nil, err
	}
	return &Use{store: v.store, sd: sd, taskID: taskID, names: slices.Compact(slices.Sorted(slices.Values(names)))}, nil
}

// Record writes the use's audit rows (secret.use, one per secret: the task
// and the secret's name, never the value). Call it before the values leave
// the coordinator.
func (u *Use) Record(ctx context.Context) error {
	if u == nil {
		return nil
	}
	return u.store.AuditSecretUses(ctx, uses(u.sd.Name, u.sd.Role, u.taskID, u.names, "ok"))
}

// RecordUse writes the audit rows (secret.use, "ok") of a use Authorize
// allowed sd outside an assignment, for what (e.g. "task_… notify": a
// notify body signed with the secret).
func RecordUse(ctx context.Context, st *store.Store, sd Standing, what string, names []string) error {
	return st.AuditSecretUses(ctx, uses(sd.Name, sd.Role, what, names, "ok"))
}

// RecordRefused writes the audit rows of a use Authorize refused with err
// for what (a task's id, "schedule NAME"); other errors record nothing.
func RecordRefused(ctx context.Context, st *store.Store, what string, err error) error {
	var denied *DeniedError
	if !errors.As(err, &denied) {
		return nil
	}
	return st.AuditSecretUses(ctx, uses(denied.Who, denied.Role, what, denied.Names, connect.CodePermissionDenied.String()))
}

func uses(who, role, what string, names []string, result string) []store.SecretUse {
	out := make([]store.SecretUse, len(names))
	for i, n := range names {
		out[i] = store.SecretUse{Who: who, Role: role, Target: what + " secret " + n, Result: result}
	}
	return out
}
