package taskspec

import (
	"fmt"
	"strings"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// MaxSecrets bounds spec.secrets: each is resolved and sent to the node with
// every assignment, and redacted from every byte of output.
const MaxSecrets = 32

// MaxSecretNameBytes is a DNS label's length, which secret names are.
const MaxSecretNameBytes = 63

// MaxSecretFileBytes bounds a secret's file name under /run/secrets.
const MaxSecretFileBytes = 128

// SecretNameProblem returns why a secret's name is not a DNS-style label
// (lower-case letters, digits and '-', starting and ending with a letter or
// digit, at most 63 bytes), or "" when it is one. Names are shown in `podium
// secret ls` and written into [redacted:NAME] markers, so they are kept to a
// charset that needs no quoting anywhere.
func SecretNameProblem(name string) string {
	if name == "" {
		return "empty secret name: use lower-case letters, digits and '-', e.g. db-password"
	}
	if len(name) > MaxSecretNameBytes {
		return fmt.Sprintf("secret name %s is %d bytes, longer than %d", clip(name), len(name), MaxSecretNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Sprintf("secret name %q: use only lower-case letters, digits and '-', e.g. db-password", name)
		}
	}
	if name[0] == '-' || name[len(name)-1] == '-' {
		return fmt.Sprintf("secret name %q starts or ends with '-': start and end with a letter or digit", name)
	}
	return ""
}

// DefaultSecretEnv is the variable a secret is given in when its reference
// names neither env nor file: its name upper-cased with '-' as '_'
// (db-password becomes DB_PASSWORD).
func DefaultSecretEnv(name string) string {
	return strings.ReplaceAll(strings.ToUpper(name), "-", "_")
}

// secretEnvProblem holds a secret's variable to the shell's rule
// ([A-Za-z_][A-Za-z0-9_]*), stricter than spec.env's: a secret lands in
// programs that read it from a shell as often as not.
func secretEnvProblem(k string) string {
	if k == "" || len(k) > MaxEnvKeyBytes {
		return fmt.Sprintf("variable name %s: give 1 to %d letters, digits and '_'", clip(k), MaxEnvKeyBytes)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || i > 0 && '0' <= c && c <= '9') {
			return fmt.Sprintf("variable name %q: use letters, digits and '_', not starting with a digit, e.g. PGPASSWORD", k)
		}
	}
	return ""
}

// secretFileProblem keeps a secret's file a plain name directly under
// /run/secrets: no directories, no dot files, nothing a shell or a path join
// could read as something else.
func secretFileProblem(f string) string {
	if f == "" || len(f) > MaxSecretFileBytes {
		return fmt.Sprintf("file name %s: give 1 to %d letters, digits and . _ -", clip(f), MaxSecretFileBytes)
	}
	if f[0] == '.' {
		return fmt.Sprintf("file name %q starts with '.': give a plain name such as deploy.pem", f)
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("file name %q: use only letters, digits and . _ - (the file is /run/secrets/NAME, no directories)", f)
		}
	}
	return ""
}

// checkSecrets checks spec.secrets and fills in the default variable of a
// reference that names neither env nor file. It returns the references to
// store (the same slice when nothing needed filling).
func checkSecrets(spec *podiumv1.TaskSpec) ([]*podiumv1.SecretRef, error) {
	refs := spec.GetSecrets()
	if len(refs) > MaxSecrets {
		return nil, fieldErr("spec.secrets", "has %d secrets, more than %d", len(refs), MaxSecrets)
	}
	names, envs, files := map[string]bool{}, map[string]string{}, map[string]string{}
	out, copied := refs, false
	for i, r := range refs {
		field := fmt.Sprintf("spec.secrets[%d]", i)
		if r == nil {
			return nil, fieldErr(field, "empty: give the secret's name")
		}
		if p := SecretNameProblem(r.GetName()); p != "" {
			return nil, fieldErr(field+".name", "%s", p)
		}
		if names[r.GetName()] {
			return nil, fieldErr(field+".name", "secret %q is named twice: give env and file in one entry", r.GetName())
		}
		names[r.GetName()] = true
		env, file := r.GetEnv(), r.GetFile()
		if env == "" && file == "" {
			env = DefaultSecretEnv(r.GetName())
			if !copied {
				out, copied = make([]*podiumv1.SecretRef, len(refs)), true
				copy(out, refs)
			}
			out[i] = &podiumv1.SecretRef{Name: r.GetName(), Env: env}
		}
		if env != "" {
			if p := secretEnvProblem(env); p != "" {
				return nil, fieldErr(field+".env", "%s", p)
			}
			if _, clash := spec.GetEnv()[env]; clash {
				return nil, fieldErr(field+".env", "%s is also set in spec.env: a variable comes from one place; drop one of them", env)
			}
			if other, dup := envs[env]; dup {
				return nil, fieldErr(field+".env", "%s is also secret %q's variable", env, other)
			}
			envs[env] = r.GetName()
		}
		if file != "" {
			if p := secretFileProblem(file); p != "" {
				return nil, fieldErr(field+".file", "%s", p)
			}
			if other, dup := files[file]; dup {
				return nil, fieldErr(field+".file", "%s is also secret %q's file", file, other)
			}
			files[file] = r.GetName()
		}
	}
	return out, nil
}

// ParseSecretFlag reads one --secret NAME[=ENV] as the CLI takes it: the
// secret NAME in the variable ENV, or in DefaultSecretEnv(NAME) without one.
func ParseSecretFlag(v string) (*podiumv1.SecretRef, error) {
	name, env, hasEnv := strings.Cut(v, "=")
	if p := SecretNameProblem(name); p != "" {
		return nil, fmt.Errorf("--secret %s: %s", clip(v), p)
	}
	if !hasEnv {
		env = DefaultSecretEnv(name)
	}
	if p := secretEnvProblem(env); p != "" {
		return nil, fmt.Errorf("--secret %s: %s", clip(v), p)
	}
	return &podiumv1.SecretRef{Name: name, Env: env}, nil
}
