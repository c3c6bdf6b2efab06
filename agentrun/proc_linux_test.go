package agentrun

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deathEnv makes the test binary run one command the way `loopguard run`
// does (runCommand) instead of running tests, until it is killed.
const deathEnv = "AGENTRUN_TEST_PARENT_DIES"

func init() {
	if os.Getenv(deathEnv) != "1" {
		return
	}
	// The command ignores SIGTERM (an ignored signal stays ignored across
	// exec) and prints its pid.
	_, _ = runCommand(context.Background(), Options{
		Command: []string{"sh", "-c", `trap '' TERM; echo $$; exec sleep 60`},
		Stdout:  os.Stdout, Stderr: os.Stderr,
	}, os.Environ())
	os.Exit(0)
}

// TestAgentDiesWithLoopguard: when loopguard is killed outright (SIGKILL,
// so it forwards nothing), the agent it runs dies too, even one that
// ignores SIGTERM.
func TestAgentDiesWithLoopguard(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), deathEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("reading the agent's pid: %v", err)
	}
	agent, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(agent, syscall.SIGKILL) })
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(agent) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent (pid %d) still runs 10s after loopguard was killed", agent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs: it exists and is not a zombie waiting
// for its new parent to reap it.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's name in parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
