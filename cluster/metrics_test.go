package cluster

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"

	"github.com/musterhq/muster/testwait"
)

// recordingSink keeps what it is given: "key label=value ..." per call.
type recordingSink struct {
	mu   sync.Mutex
	seen []string
}

func (s *recordingSink) add(key []string, labels []gometrics.Label) {
	line := strings.Join(key, ".")
	for _, l := range labels {
		line += " " + l.Name + "=" + l.Value
	}
	s.mu.Lock()
	s.seen = append(s.seen, line)
	s.mu.Unlock()
}

func (s *recordingSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

func (s *recordingSink) SetGauge(k []string, _ float32)    { s.add(k, nil) }
func (s *recordingSink) EmitKey(k []string, _ float32)     { s.add(k, nil) }
func (s *recordingSink) IncrCounter(k []string, _ float32) { s.add(k, nil) }
func (s *recordingSink) AddSample(k []string, _ float32)   { s.add(k, nil) }
func (s *recordingSink) SetGaugeWithLabels(k []string, _ float32, l []gometrics.Label) {
	s.add(k, l)
}
func (s *recordingSink) IncrCounterWithLabels(k []string, _ float32, l []gometrics.Label) {
	s.add(k, l)
}
func (s *recordingSink) AddSampleWithLabels(k []string, _ float32, l []gometrics.Label) {
	s.add(k, l)
}

// Each member's metrics reach its own sink alone, without the routing
// label, and none once it is closed; a member without a sink sends none.
func TestMetricsRoutedPerMember(t *testing.T) {
	a, b := &recordingSink{}, &recordingSink{}
	ma := newMember(t, Config{Name: "a", Profile: Local, MetricSink: a})
	newMember(t, Config{Name: "b", Profile: Local, MetricSink: b})
	newMember(t, Config{Name: "c", Profile: Local})
	testwait.Until(t, 10*time.Second, "a's sink to hear of its gossip", func() bool {
		return slices.Contains(a.lines(), "memberlist.msg.alive")
	})

	// Calls as memberlist makes them: labelled with a member, another
	// member, none.
	mb := b.lines()
	gometrics.IncrCounterWithLabels([]string{"test", "a"}, 1, []gometrics.Label{{Name: "x", Value: "1"}, {Name: memberLabel, Value: ma.metricsID}})
	gometrics.IncrCounterWithLabels([]string{"test", "nobody"}, 1, []gometrics.Label{{Name: memberLabel, Value: "no such member"}})
	gometrics.IncrCounterWithLabels([]string{"test", "unlabelled"}, 1, nil)
	if !slices.Contains(a.lines(), "test.a x=1") {
		t.Errorf("a's sink did not get its metric, with its other labels: %q", a.lines())
	}
	for _, line := range b.lines()[len(mb):] {
		if strings.HasPrefix(line, "test.") {
			t.Errorf("b's sink got %q", line)
		}
	}
	for _, line := range append(a.lines(), b.lines()...) {
		if strings.Contains(line, memberLabel) || line == "test.nobody" || line == "test.unlabelled" {
			t.Errorf("a sink got %q", line)
		}
	}

	ma.Close()
	n := len(a.lines())
	gometrics.IncrCounterWithLabels([]string{"test", "closed"}, 1, []gometrics.Label{{Name: memberLabel, Value: ma.metricsID}})
	if got := a.lines(); len(got) != n {
		t.Errorf("a's sink got %q after its member closed", got[n:])
	}
}
