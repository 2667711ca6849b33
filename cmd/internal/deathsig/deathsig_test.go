package deathsig

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestChildDiesWithParent: a child started by Start in a process that is
// then killed is killed too. The middle process is this test binary,
// re-run; it starts a sleeping child, prints its pid and waits to be
// killed.
func TestChildDiesWithParent(t *testing.T) {
	if os.Getenv("DEATHSIG_MIDDLE") != "" {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		// Start from a goroutine that then ends: the child must live on
		// while this process does.
		pid := make(chan int)
		go func() {
			if _, err := Start(cmd); err != nil {
				panic(err)
			}
			pid <- cmd.Process.Pid
		}()
		os.Stdout.WriteString(strconv.Itoa(<-pid) + "\n")
		time.Sleep(time.Minute)
		return
	}
	middle := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithParent$")
	middle.Env = append(os.Environ(), "DEATHSIG_MIDDLE=1")
	out, err := middle.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := middle.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	child, err := strconv.Atoi(string(buf[:n-1]))
	if err != nil {
		t.Fatalf("the middle process said %q", buf[:n])
	}
	time.Sleep(200 * time.Millisecond) // the goroutine that started it has ended
	if syscall.Kill(child, 0) != nil {
		t.Fatalf("the child %d died with the goroutine that started it, not with its process", child)
	}
	_ = middle.Process.Kill()
	_ = middle.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(child, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the child %d outlived its killed parent", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
