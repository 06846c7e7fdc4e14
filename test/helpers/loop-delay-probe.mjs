// Preloaded into a service process (`node --import ./test/helpers/loop-delay-probe.mjs`) to measure how long
// its event loop is held. On each SIGUSR2 it prints `loop-delay-probe seq=<n> max=<ms> samples=<count>` (the
// longest delay beyond the 10 ms sampling resolution since the previous SIGUSR2) and starts a new window.
// Plain JavaScript so that it loads before tsx.
import { monitorEventLoopDelay } from 'node:perf_hooks';

const resolution = 10;
const histogram = monitorEventLoopDelay({ resolution });
histogram.enable();
let sequence = 0;
process.on('SIGUSR2', () => {
  sequence += 1;
  const max = histogram.count > 0 ? Math.max(0, histogram.max / 1e6 - resolution) : 0;
  process.stdout.write(`loop-delay-probe seq=${sequence} max=${max.toFixed(1)} samples=${histogram.count}\n`);
  histogram.reset();
});
