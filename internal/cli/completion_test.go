package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// completionCases are command lines being completed (the last word is the one under the cursor) and
// words the completion must offer.
var completionCases = []struct {
	line []string
	want []string
	not  []string
}{
	{[]string{""}, []string{"demo", "jobs", "cron", "completion", "--database-url"}, []string{"list"}},
	{[]string{"jobs", ""}, []string{"list", "get", "cancel"}, []string{"demo"}},
	{[]string{"--database-url", "sqlite:x.db", "jobs", "list", "--st"}, []string{"--state"}, []string{"--queue"}},
	{[]string{"jobs", "list", "--state", ""}, []string{"discarded", "available"}, []string{"--queue"}},
	{[]string{"jobs", "list", "--queue", "email", "--"}, []string{"--tag", "--json", "--kind"}, nil},
	{[]string{"cron", "add", "nightly", "--overlap", ""}, []string{"skip", "cancel_previous"}, nil},
	{[]string{"cron", ""}, []string{"list", "add", "pause", "resume", "delete"}, nil},
	{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}, nil},
	{[]string{"enqueue", "a.b", "--"}, []string{"--args", "--delay", "--queue"}, []string{"--state"}},
}

func checkCompletion(t *testing.T, line []string, got []string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !containsWord(got, w) {
			t.Errorf("completing %q: %q lacks %q", line, got, w)
		}
	}
	for _, w := range not {
		if containsWord(got, w) {
			t.Errorf("completing %q: %q has %q", line, got, w)
		}
	}
}

func containsWord(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}

// TestCompletionBash sources the bash script and completes command lines with it.
func TestCompletionBash(t *testing.T) {
	script := filepath.Join(t.TempDir(), "pronto.bash")
	if err := os.WriteFile(script, []byte(run(t, "completion", "bash").ok(t).stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range completionCases {
		words := append([]string{"pronto"}, c.line...)
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_pronto\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command("bash", "--norc", "--noprofile", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		checkCompletion(t, c.line, strings.Fields(string(out)), c.want, c.not)
	}
}

// TestCompletionZshAndFish: the zsh and fish scripts offer the same words (checked by running the
// shells when they are installed; the scripts' words are checked in any case).
func TestCompletionZshAndFish(t *testing.T) {
	for _, shell := range []string{"zsh", "fish"} {
		out := run(t, "completion", shell).ok(t).stdout
		for _, w := range []string{"jobs", "list", "--state", "cancel_previous", "bash zsh fish"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s script lacks %q", shell, w)
			}
		}
		path, err := exec.LookPath(shell)
		if err != nil {
			if os.Getenv("CI") != "" { // CI installs both (.ci/run): there, not running it is a failure
				t.Fatalf("%s is not installed, so its completion script cannot be run: apt-get install %s", shell, shell)
			}
			t.Logf("%s is not installed: its script was not run (apt-get install %s)", shell, shell)
			continue
		}
		script := filepath.Join(t.TempDir(), "pronto."+shell)
		if err := os.WriteFile(script, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(path, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
		if shell == "zsh" {
			// compadd stubbed to print its candidates; zsh filters them by the prefix itself, so only
			// the wanted words are checked.
			for _, c := range completionCases {
				var quoted []string
				for _, w := range append([]string{"pronto"}, c.line...) {
					quoted = append(quoted, "'"+w+"'")
				}
				prog := "compdef() { :; }; compadd() { shift; print -l -- \"$@\"; }; source " + script +
					"; words=(" + strings.Join(quoted, " ") + "); CURRENT=" + strconv.Itoa(len(quoted)) + "; _pronto"
				out, err := exec.Command(path, "-f", "-c", prog).CombinedOutput()
				if err != nil {
					t.Fatalf("zsh: %v\n%s", err, out)
				}
				checkCompletion(t, c.line, strings.Fields(string(out)), c.want, nil)
			}
		}
		if shell == "fish" {
			for _, c := range completionCases {
				line := "pronto " + strings.Join(c.line, " ")
				prog := "source " + script + "; complete -C " + fishArg(line)
				out, err := exec.Command(path, "--no-config", "-c", prog).CombinedOutput()
				if err != nil {
					t.Fatalf("fish: %v\n%s", err, out)
				}
				var got []string
				for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					got = append(got, strings.SplitN(l, "\t", 2)[0])
				}
				checkCompletion(t, c.line, got, c.want, c.not)
			}
		}
	}
	run(t, "completion", "tcsh").fails(t, ExitUsage, `unknown shell "tcsh": give bash, zsh or fish`)
	run(t, "completion").fails(t, ExitUsage, "missing argument")
}

func fishArg(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
