package podiumv1

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestAssignIsLoggedWithoutSecrets(t *testing.T) {
	a := &Assign{TaskId: "task_1", Attempt: 2, Spec: &TaskSpec{
		Image: "alpine:3", Env: map[string]string{"API_TOKEN": "s3cr3t-value"},
	}}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(h(&buf))
		log.Info("assign", "assign", a)
		log.Info("spec", "spec", a.Spec)
		out := buf.String()
		if strings.Contains(out, "s3cr3t-value") {
			t.Fatalf("a secret reached the log: %s", out)
		}
		if !strings.Contains(out, "API_TOKEN") || !strings.Contains(out, "task_1") {
			t.Fatalf("the redacted log lost what an operator needs: %s", out)
		}
	}
}

func TestRegistryAuthsAreLoggedWithoutPasswords(t *testing.T) {
	ra := &RegistryAuth{Host: "registry.example.com:5000", Username: "ci-bot", Password: "pull-pass-9f8e7d"}
	a := &Assign{TaskId: "task_1", Attempt: 1, Spec: &TaskSpec{Image: "registry.example.com:5000/app:1"}, RegistryAuths: []*RegistryAuth{ra}}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(h(&buf))
		log.Info("assign", "assign", a)
		log.Info("auth", "auth", ra)
		log.Info("auths", "auths", a.RegistryAuths)
		log.Info("printed", "text", fmt.Sprintf("%v %+v %s", ra, a.RegistryAuths, a.RegistryAuths))
		out := buf.String()
		if strings.Contains(out, "pull-pass-9f8e7d") {
			t.Fatalf("a registry password reached the log: %s", out)
		}
		if strings.Count(out, "registry.example.com:5000") < 7 || !strings.Contains(out, "ci-bot") {
			t.Fatalf("the log should name the registry host and user each time: %s", out)
		}
	}
}

func TestSecretValuesAreLoggedByNameOnly(t *testing.T) {
	v := &SecretValue{Name: "db-password", Value: []byte("hunter2-secret"), Env: "PGPASSWORD"}
	a := &Assign{TaskId: "task_1", Attempt: 1, Spec: &TaskSpec{Image: "alpine:3"}, Secrets: []*SecretValue{v}}
	again := &HelloAck{Adopt: []*Adopt{{TaskId: "task_1", Attempt: 1, Keep: true, Secrets: []*SecretValue{v}}}}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(h(&buf))
		log.Info("assign", "assign", a)
		log.Info("secret", "secret", v)
		log.Info("again", "hello_ack", again)
		log.Info("adopt", "adopt", again.Adopt[0])
		out := buf.String()
		if strings.Contains(out, "hunter2-secret") {
			t.Fatalf("a secret value reached the log: %s", out)
		}
		if !strings.Contains(out, "db-password") {
			t.Fatalf("the log should name the secret: %s", out)
		}
	}
}
