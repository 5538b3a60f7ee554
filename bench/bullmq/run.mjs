// Drives BullMQ in one of the four bullmq-bench scenarios and prints one JSON line:
// {"jobs": measured jobs, "seconds": measured window}. Warm-up jobs run first and are not counted.
// Usage: node run.mjs SCENARIO JOBS WARMUP HOST PORT QUEUE
import { Queue, Worker } from 'bullmq';

const [scenario, jobsArg, warmArg, host, portArg, name] = process.argv.slice(2);
const jobs = Number(jobsArg), warm = Number(warmArg);
const connection = { host, port: Number(portArg), maxRetriesPerRequest: null };
const queue = new Queue(name, { connection });

async function add(n) { for (let i = 0; i < n; i++) await queue.add('bench', { i }); }
async function addBulk(n) {
  for (let i = 0; i < n; i += 50) {
    const batch = [];
    for (let k = i; k < Math.min(n, i + 50); k++) batch.push({ name: 'bench', data: { i: k } });
    await queue.addBulk(batch);
  }
}
async function consume(n, concurrency) {
  let done = 0;
  let resolve;
  const finished = new Promise((r) => { resolve = r; });
  const worker = new Worker(name, async () => {}, { connection, concurrency });
  worker.on('completed', () => { if (++done === n) resolve(); });
  await finished;
  await worker.close();
}

let seconds;
if (scenario === 'queue-add' || scenario === 'queue-add-bulk') {
  const f = scenario === 'queue-add' ? add : addBulk;
  await f(warm);
  const t0 = process.hrtime.bigint();
  await f(jobs);
  seconds = Number(process.hrtime.bigint() - t0) / 1e9;
} else {
  const concurrency = scenario === 'worker-concurrent' ? 100 : 1;
  await addBulk(warm);
  await consume(warm, concurrency);
  await addBulk(jobs);
  const t0 = process.hrtime.bigint();
  await consume(jobs, concurrency);
  seconds = Number(process.hrtime.bigint() - t0) / 1e9;
}
await queue.obliterate({ force: true });
await queue.close();
console.log(JSON.stringify({ jobs, seconds }));
process.exit(0);
