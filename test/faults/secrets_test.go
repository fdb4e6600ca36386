package faults

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// dbPassword is the value of the secret db-password. Every encoding the
// agent promises to redact changes it: URL query escaping (space, &, @, /,
// ?, a two-byte UTF-8 letter), and its base64 has a '/' that base64url
// writes '_', so the task printing both forms prints two distinct texts.
const dbPassword = "Tr0ub4dor&3 p@ss/wörd??"

// deployKey is the value of the file secret deploy-key: several lines, as a
// key file has.
const deployKey = "-----BEGIN PODIUM TEST KEY-----\nMC4CAQAwBQYDK2VwBCIEIKx9vT2q\n-----END PODIUM TEST KEY-----\n"

// secretForms are the texts of v that must never reach a user, a log or
// the database: itself and the encodings the task below prints.
func secretForms(v string) map[string]string {
	h := hex.EncodeToString([]byte(v))
	return map[string]string{
		"raw":       v,
		"base64":    base64.StdEncoding.EncodeToString([]byte(v)),
		"base64url": base64.URLEncoding.EncodeToString([]byte(v)),
		"url":       url.QueryEscape(v),
		"hex":       h,
		"HEX":       strings.ToUpper(h),
	}
}

// checkNoSecret fails the test if any form of v is in what.
func checkNoSecret(t testing.TB, where string, what []byte, v string) {
	t.Helper()
	for name, f := range secretForms(v) {
		if bytes.Contains(what, []byte(f)) {
			t.Errorf("%s holds the secret's %s form %q", where, name, f)
		}
	}
}

// startSecretsReplica starts a replica whose secrets key is a fresh file of
// 32 random bytes (mode 0600), as docs/operations.md says to make one.
func startSecretsReplica(t testing.TB, databaseURL string) *Replica {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "secrets.key")
	if err := os.WriteFile(file, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return StartReplica(t, databaseURL, "--secrets-key-file", file)
}

// podiumWithStdin runs `podium --server URL ARGS...` with the test token
// and stdin, to completion, and fails the test unless it exits 0. It
// returns stdout and stderr.
func podiumWithStdin(t testing.TB, r *Replica, stdin string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "podium"), append([]string{"--server", r.URL()}, args...)...)
	cmd.Env = append(os.Environ(), "PODIUM_TOKEN="+coordtest.Token)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podium %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// setSecret stores a secret through the CLI, the value on stdin.
func setSecret(t testing.TB, r *Replica, name, value string) {
	t.Helper()
	podiumWithStdin(t, r, value, "secret", "set", name)
}

// piecesFn is a shell function that prints its argument in three separate
// writes with a pause between them, so that the agent receives a secret's
// form split across reads.
const piecesFn = `pieces() { s=$1; n=${#s}; a=$((n/3)); b=$((2*n/3)); printf %s "${s:0:a}"; sleep 0.2; printf %s "${s:a:b-a}"; sleep 0.2; printf %s "${s:b}"; }; `

// encodeFns are shell functions that compute, inside the task, the forms
// of $PGPASSWORD from the value alone (nothing of it is in the command,
// which is stored with the task): base64, base64url, URL query escaping,
// hex and upper-case hex.
const encodeFns = `b64() { printf %s "$PGPASSWORD" | base64 | tr -d '\n'; }; ` +
	`b64url() { b64 | tr '+/' '-_'; }; ` +
	`hexl() { printf %s "$PGPASSWORD" | od -An -v -tx1 | tr -d ' \n'; }; ` +
	`urlq() { q=; for h in $(printf %s "$PGPASSWORD" | od -An -v -tx1); do c=$(printf "\\$(printf %03o 0x$h)"); ` +
	`case "$c" in [A-Za-z0-9._~-]) q="$q$c";; " ") q="$q+";; *) q="$q%$(echo $h | tr a-f A-F)";; esac; done; printf %s "$q"; }; `

// TestSecretRedactedInEveryForm stores a secret with `podium secret set`
// (value on stdin) and runs a task with `--secret db-password=PGPASSWORD`
// that prints the value raw, base64, base64url, URL-escaped, hex and
// upper-case hex, each computed by the task itself and written in three
// pieces with pauses between them, on stdout, and raw on stderr. What
// `podium run` printed, what `podium logs` prints and the stored output
// are the task's output byte-exact except that each form reads
// [redacted:db-password]. Then no form of the value is anywhere in a
// pg_dump of the database, in the coordinator's log or in the agent's.
func TestSecretRedactedInEveryForm(t *testing.T) {
	t.Parallel()
	forms := secretForms(dbPassword)
	if forms["base64"] == forms["base64url"] || forms["url"] == dbPassword {
		t.Fatalf("the test's value %q does not tell base64 from base64url or is not changed by URL escaping", dbPassword)
	}
	cluster := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, cluster)
	r := startSecretsReplica(t, db.URL)
	ag := EnrollAgent(t, r, r.URL())
	ag.Start()
	r.WaitOnlineOn(t, ag.Node)
	setSecret(t, r, "db-password", dbPassword)

	script := piecesFn + encodeFns +
		`for f in raw base64 base64url url hex HEX; do case $f in raw) v=$PGPASSWORD;; base64) v=$(b64);; base64url) v=$(b64url);; ` +
		`url) v=$(urlq);; hex) v=$(hexl);; HEX) v=$(hexl | tr a-f A-F);; esac; printf '%s: ' $f; pieces "$v"; echo; done; ` +
		`pieces "$PGPASSWORD" >&2; echo >&2; echo done`
	run := StartRun(t, []string{r.URL()}, "--secret", "db-password=PGPASSWORD", "--image", dockertest.EnsureImage(t), "--", "sh", "-c", script)
	id := run.TaskID(t)
	if code := run.Wait(t); code != 0 {
		t.Fatalf("podium run exited %d; stderr:\n%s", code, run.Stderr())
	}
	const red = "[redacted:db-password]"
	want := "raw: " + red + "\nbase64: " + red + "\nbase64url: " + red + "\nurl: " + red + "\nhex: " + red + "\nHEX: " + red + "\ndone\n"
	if got := string(run.Stdout()); got != want {
		t.Errorf("podium run printed:\n%s\nwant:\n%s", got, want)
	}
	checkNoSecret(t, "podium run's stderr", []byte(run.Stderr()), dbPassword)
	if !strings.Contains(run.Stderr(), red+"\n") {
		t.Errorf("podium run's stderr does not show the task's stderr line as %s:\n%s", red, run.Stderr())
	}
	stdout, stderr := r.StoredOutput(t, id)
	if string(stdout) != want {
		t.Errorf("the stored stdout is:\n%s\nwant:\n%s", stdout, want)
	}
	if string(stderr) != red+"\n" {
		t.Errorf("the stored stderr is %q, want %q", stderr, red+"\n")
	}
	logsOut, logsErr := podiumWithStdin(t, r, "", "logs", id)
	if logsOut != want {
		t.Errorf("podium logs printed:\n%s\nwant:\n%s", logsOut, want)
	}
	checkNoSecret(t, "podium logs' stderr", []byte(logsErr), dbPassword)
	taskOut, _ := podiumWithStdin(t, r, "", "task", "get", id)
	checkNoSecret(t, "podium task get", []byte(taskOut), dbPassword)

	dump, err := exec.Command(filepath.Join(pgtest.BinDir, "pg_dump"), "--dbname", db.URL).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if !bytes.Contains(dump, []byte(id)) || !bytes.Contains(dump, []byte("db-password")) {
		t.Fatalf("the pg_dump (%d bytes) has not the task %s or the secret's name: it dumped the wrong database", len(dump), id)
	}
	checkNoSecret(t, "the pg_dump of the database", dump, dbPassword)
	checkNoSecret(t, "the coordinator's log", []byte(r.Log()), dbPassword)
	checkNoSecret(t, "the agent's log", []byte(ag.Log()), dbPassword)
	NothingLeft(t, ag.Node)
}

// TestSecretRedactedAcrossAgentRestart runs a task that prints the secret
// (raw and hex, each in pieces) on 30 numbered lines, SIGKILLs the agent
// once a few lines are out and starts it again while the task goes on: the
// restarted agent adopts the task and must redact what follows too (the
// coordinator resends the attempt's secrets with the adoption). The stored
// output and what `podium run` printed are then every line once, in order,
// with each form as [redacted:db-password], and nothing of the value in
// either, nor in the agent's log.
func TestSecretRedactedAcrossAgentRestart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := startSecretsReplica(t, db.URL)
	ag := EnrollAgent(t, r, r.URL())
	ag.Start()
	r.WaitOnlineOn(t, ag.Node)
	setSecret(t, r, "db-password", dbPassword)

	const lines = 30
	script := piecesFn + encodeFns +
		fmt.Sprintf(`for i in $(seq 1 %d); do printf 'line %%s ' $i; pieces "$PGPASSWORD"; printf ' '; pieces "$(hexl)"; echo; done`, lines)
	run := StartRun(t, []string{r.URL()}, "--secret", "db-password=PGPASSWORD", "--image", dockertest.EnsureImage(t), "--", "sh", "-c", script)
	id := run.TaskID(t)
	run.WaitStdout(t, "line 4 ")
	ag.Kill()
	if !taskRunningInDocker(t, id) {
		t.Fatal("the task's container is not running once the agent was killed: the task ended before the fault, and the test tested no adoption")
	}
	ag.Start()
	r.WaitOnlineOn(t, ag.Node)
	if code := run.Wait(t); code != 0 {
		t.Fatalf("podium run exited %d; stderr:\n%s", code, run.Stderr())
	}

	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d [redacted:db-password] [redacted:db-password]\n", i)
	}
	if got := string(run.Stdout()); got != want.String() {
		t.Errorf("podium run printed:\n%s\nwant:\n%s", got, want.String())
	}
	stdout, _ := r.StoredOutput(t, id)
	if string(stdout) != want.String() {
		t.Errorf("the stored stdout is:\n%s\nwant:\n%s", stdout, want.String())
	}
	checkNoSecret(t, "podium run's stdout", run.Stdout(), dbPassword)
	checkNoSecret(t, "the stored stdout", stdout, dbPassword)
	checkNoSecret(t, "the agent's log", []byte(ag.Log()), dbPassword)
	checkNoSecret(t, "the coordinator's log", []byte(r.Log()), dbPassword)
	if tk := r.Task(t, id); tk.Attempt != 1 {
		t.Errorf("the task ended as attempt %d, want 1: the restarted agent should have adopted it", tk.Attempt)
	}
	NothingLeft(t, ag.Node)
}

// TestFileSecret runs a task from a spec file naming `secrets: [{name:
// deploy-key, file: deploy.pem}]` as user 1000:1000: the task finds
// /run/secrets/deploy.pem with mode 0400, owned by its user, on a tmpfs,
// reads back the exact value (it prints the sha256 it computes, which
// the test compares with the value's), and the value it then prints with
// cat reaches podium run and the stored output as [redacted:deploy-key].
func TestFileSecret(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := startSecretsReplica(t, db.URL)
	ag := EnrollAgent(t, r, r.URL())
	ag.Start()
	r.WaitOnlineOn(t, ag.Node)
	keyFile := filepath.Join(t.TempDir(), "deploy.pem")
	if err := os.WriteFile(keyFile, []byte(deployKey), 0o600); err != nil {
		t.Fatal(err)
	}
	podiumWithStdin(t, r, "", "secret", "set", "deploy-key", "--from-file", keyFile)

	spec := fmt.Sprintf(`image: %s
user: "1000:1000"
secrets:
  - name: deploy-key
    file: deploy.pem
command:
  - sh
  - -c
  - |
    f=/run/secrets/deploy.pem
    echo "mode $(stat -c '%%a %%u:%%g' $f) me $(id -u):$(id -g)"
    echo "fs $(awk '$2 == "/run/secrets" {print $3}' /proc/mounts)"
    echo "sha256 $(sha256sum < $f | cut -c1-64)"
    cat $f
    echo end
`, dockertest.EnsureImage(t))
	specFile := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(specFile, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	run := StartRun(t, []string{r.URL()}, "--spec", specFile)
	id := run.TaskID(t)
	if code := run.Wait(t); code != 0 {
		t.Fatalf("podium run exited %d; stdout:\n%s\nstderr:\n%s", code, run.Stdout(), run.Stderr())
	}
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(deployKey)))
	want := "mode 400 1000:1000 me 1000:1000\nfs tmpfs\nsha256 " + sum + "\n[redacted:deploy-key]end\n"
	if got := string(run.Stdout()); got != want {
		t.Errorf("podium run printed:\n%s\nwant:\n%s", got, want)
	}
	stdout, _ := r.StoredOutput(t, id)
	if string(stdout) != want {
		t.Errorf("the stored stdout is:\n%s\nwant:\n%s", stdout, want)
	}
	checkNoSecret(t, "the agent's log", []byte(ag.Log()), deployKey)
	checkNoSecret(t, "the coordinator's log", []byte(r.Log()), deployKey)
	NothingLeft(t, ag.Node)
}
