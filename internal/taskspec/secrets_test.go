package taskspec

import (
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A spec file's secrets reach the spec, and a reference naming neither env
// nor file gets its default variable when validated.
func TestParseSecretsAndDefaultEnv(t *testing.T) {
	spec, err := Parse(strings.NewReader(`image: alpine:3
secrets:
  - {name: db-password, env: PGPASSWORD}
  - {name: deploy-key, file: deploy.pem}
  - name: api-token
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(spec); err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, r := range spec.GetSecrets() {
		got = append(got, r.GetName()+"|"+r.GetEnv()+"|"+r.GetFile())
	}
	want := "db-password|PGPASSWORD|,deploy-key||deploy.pem,api-token|API_TOKEN|"
	if strings.Join(got, ",") != want {
		t.Fatalf("secrets = %s, want %s", strings.Join(got, ","), want)
	}
	if _, err := Parse(strings.NewReader("image: alpine:3\nsecrets:\n  - {name: a, path: x}\n")); err == nil || !strings.Contains(err.Error(), `unknown key "secrets[0].path"`) {
		t.Fatalf("an unknown key in a secret: %v", err)
	}
}

// Each bad reference is refused with the field it is in and what to do.
func TestValidateSecretsRefusesBadReferences(t *testing.T) {
	many := make([]*podiumv1.SecretRef, MaxSecrets+1)
	for i := range many {
		many[i] = &podiumv1.SecretRef{Name: "s" + strings.Repeat("x", i%50) + string(rune('a'+i%26)), Env: "E" + strings.Repeat("X", i)}
	}
	for _, c := range []struct {
		refs  []*podiumv1.SecretRef
		env   map[string]string
		field string
		want  string
	}{
		{[]*podiumv1.SecretRef{{Name: "DB"}}, nil, "spec.secrets[0].name", "lower-case"},
		{[]*podiumv1.SecretRef{{Name: "db-"}}, nil, "spec.secrets[0].name", "starts or ends"},
		{[]*podiumv1.SecretRef{{Name: strings.Repeat("a", 64)}}, nil, "spec.secrets[0].name", "longer than 63"},
		{[]*podiumv1.SecretRef{{Name: "a"}, {Name: "a", File: "f"}}, nil, "spec.secrets[1].name", "named twice"},
		{[]*podiumv1.SecretRef{{Name: "a", Env: "1X"}}, nil, "spec.secrets[0].env", "not starting with a digit"},
		{[]*podiumv1.SecretRef{{Name: "a", Env: "A-B"}}, nil, "spec.secrets[0].env", "letters, digits and '_'"},
		{[]*podiumv1.SecretRef{{Name: "db-password"}}, map[string]string{"DB_PASSWORD": "x"}, "spec.secrets[0].env", "also set in spec.env"},
		{[]*podiumv1.SecretRef{{Name: "a", Env: "X"}, {Name: "b", Env: "X"}}, nil, "spec.secrets[1].env", `secret "a"'s variable`},
		{[]*podiumv1.SecretRef{{Name: "a", File: "../etc/passwd"}}, nil, "spec.secrets[0].file", "starts with '.'"},
		{[]*podiumv1.SecretRef{{Name: "a", File: "x/y"}}, nil, "spec.secrets[0].file", "no directories"},
		{[]*podiumv1.SecretRef{{Name: "a", File: ".."}}, nil, "spec.secrets[0].file", "starts with '.'"},
		{[]*podiumv1.SecretRef{{Name: "a", File: strings.Repeat("f", MaxSecretFileBytes+1)}}, nil, "spec.secrets[0].file", "give 1 to 128"},
		{[]*podiumv1.SecretRef{{Name: "a", File: "k"}, {Name: "b", File: "k"}}, nil, "spec.secrets[1].file", `secret "a"'s file`},
		{many, nil, "spec.secrets", "more than 32"},
	} {
		spec := &podiumv1.TaskSpec{Image: "alpine:3", Env: c.env, Secrets: c.refs}
		err := Validate(spec)
		fe, ok := err.(*FieldError)
		if !ok || fe.Field != c.field || !strings.Contains(fe.Problem, c.want) {
			t.Errorf("secrets %v: %v, want %s: ...%s...", c.refs, err, c.field, c.want)
		}
	}
	ok := &podiumv1.TaskSpec{Image: "alpine:3", Secrets: []*podiumv1.SecretRef{{Name: "a", Env: "A", File: "a.pem"}}}
	if err := Validate(ok); err != nil {
		t.Fatalf("a secret as both env and file: %v", err)
	}
}

// --secret NAME[=ENV]: the default variable is the name upper-cased with '-'
// as '_'.
func TestParseSecretFlag(t *testing.T) {
	for in, want := range map[string]string{"db-password": "db-password|DB_PASSWORD", "deploy-key=KEY": "deploy-key|KEY", "a1=_x1": "a1|_x1"} {
		r, err := ParseSecretFlag(in)
		if err != nil || r.GetName()+"|"+r.GetEnv() != want {
			t.Errorf("ParseSecretFlag(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for in, want := range map[string]string{"DB": "lower-case", "db=": "give 1 to", "db=A B": "letters, digits", "": "empty secret name"} {
		if _, err := ParseSecretFlag(in); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "--secret ") {
			t.Errorf("ParseSecretFlag(%q) = %v, want --secret ...%s", in, err, want)
		}
	}
}
