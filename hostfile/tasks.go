package hostfile

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseTasksPerNode reads Slurm's per-node count format, used by
// SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE: "2(x3),1" means 2, 2, 2, 1.
// Counts must be positive and at most MaxSlots; the list holds at most
// MaxHosts entries.
func ParseTasksPerNode(s string) ([]int, error) {
	if len(s) > MaxArgLen {
		return nil, fmt.Errorf("task counts longer than %d bytes", MaxArgLen)
	}
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty task counts")
	}
	var out []int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		countText, repeatText, repeated := strings.Cut(item, "(x")
		count, err := parseSlots("task count", countText)
		if err != nil {
			return nil, fmt.Errorf("task counts %.60q: %w", s, err)
		}
		repeat := 1
		if repeated {
			digits, closed := strings.CutSuffix(repeatText, ")")
			if !closed || !allDigits(digits) || len(digits) > 7 {
				return nil, fmt.Errorf("task counts %.60q: want N(xK), got %q", s, item)
			}
			repeat, _ = strconv.Atoi(digits)
			if repeat == 0 {
				return nil, fmt.Errorf("task counts %.60q: repeat must be positive in %q", s, item)
			}
		}
		if repeat > MaxHosts-len(out) {
			return nil, fmt.Errorf("task counts %.60q: more than %d nodes", s, MaxHosts)
		}
		for range repeat {
			out = append(out, count)
		}
	}
	return out, nil
}

// FormatTasksPerNode writes counts the way Slurm does, runs of one value as
// N(xK): [2 2 2 1] gives "2(x3),1".
func FormatTasksPerNode(counts []int) string {
	var b strings.Builder
	for i := 0; i < len(counts); {
		j := i + 1
		for j < len(counts) && counts[j] == counts[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(counts[i]))
		if j-i > 1 {
			b.WriteString("(x" + strconv.Itoa(j-i) + ")")
		}
		i = j
	}
	return b.String()
}
