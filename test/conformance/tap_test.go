package conformance

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// failure is one thing a suite reported as failed: a subtest, or a whole
// test (a bail-out, a short plan, a bad exit status, a hang).
type failure struct {
	file string // the test: "chmod/02.t", "special/telldir"
	num  int    // the subtest's number; 0 for the test as a whole
	line string // what the suite printed: the TAP line, or the test's last words
}

func (f failure) String() string {
	if f.num == 0 {
		return fmt.Sprintf("%s: %s", f.file, f.line)
	}
	return fmt.Sprintf("%s #%d: %s", f.file, f.num, f.line)
}

// tapFile is the verdict on one TAP stream.
type tapFile struct {
	run      int // subtest results seen
	passed   int // ok, and not ok with a TODO directive (the suite's own "not yet")
	todo     int // results with a TODO directive, passing or not
	failures []failure
}

var (
	tapPlan   = regexp.MustCompile(`^1\.\.(\d+)`)
	tapResult = regexp.MustCompile(`^(not )?ok\b\s*(\d*)(.*)$`)
	tapTodo   = regexp.MustCompile(`(?i)#\s*todo\b`)
)

// parseTAP reads one test's TAP output and its exit status as a TAP
// harness does (prove's rules): "not ok" fails unless marked TODO; a
// "Bail out!", fewer results than planned, or a non-zero exit fails the
// test as a whole. A bail-out names the line printed before it, which says
// why.
func parseTAP(file, out string, exitCode int) tapFile {
	var r tapFile
	planned, bailed := -1, false
	var lastText string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		switch m := tapResult.FindStringSubmatch(line); {
		case strings.HasPrefix(line, "Bail out!"):
			why := line
			if lastText != "" {
				why += " (after: " + lastText + ")"
			}
			r.failures = append(r.failures, failure{file: file, line: why})
			bailed = true
		case tapPlan.MatchString(line) && planned < 0:
			planned, _ = strconv.Atoi(tapPlan.FindStringSubmatch(line)[1])
		case m != nil:
			r.run++
			num := r.run
			if m[2] != "" {
				num, _ = strconv.Atoi(m[2])
			}
			todo := tapTodo.MatchString(m[3])
			if todo {
				r.todo++
			}
			if m[1] == "" || todo {
				r.passed++
			} else {
				r.failures = append(r.failures, failure{file: file, num: num, line: line})
			}
		case line != "":
			lastText = line
		}
		if bailed {
			break
		}
	}
	if bailed {
		return r
	}
	switch {
	case planned < 0:
		r.failures = append(r.failures, failure{file: file, line: fmt.Sprintf("no plan (1..N) in its output; exit status %d", exitCode)})
	case r.run != planned:
		r.failures = append(r.failures, failure{file: file, line: fmt.Sprintf("planned %d subtests, ran %d; exit status %d", planned, r.run, exitCode)})
	case exitCode != 0:
		r.failures = append(r.failures, failure{file: file, line: fmt.Sprintf("exit status %d", exitCode)})
	}
	return r
}
