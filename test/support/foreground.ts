/**
 * Run a command the way a developer runs a server in a terminal, for tests of the standalone
 * servers (`npm run server:...`): in a process group of its own, with its output kept, waiting
 * for a ready line, and stopped with SIGINT to the whole group, as Ctrl-C would. Signalling only
 * `npm` would leave its children running (npm does not forward SIGTERM), so the group it is.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A command running in the foreground of its own process group. */
export interface Foreground {
  /** Everything it printed so far (stdout and stderr). */
  output(): string;
  /** Wait until `text` appears in its output; throws with the output if it exits or times out. */
  waitFor(text: string, timeoutMs: number): Promise<void>;
  /** SIGINT to the whole group (SIGKILL after 10 s); resolves when every process in it is gone. */
  interrupt(): Promise<void>;
}

/** True while any process of process group `group` exists. */
function groupAlive(group: number): boolean {
  try {
    process.kill(-group, 0);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
}

/** Start `npm` with `args` in the repository (a process group of its own). */
export function startForeground(args: string[]): Foreground {
  const child = spawn('npm', args, {
    cwd: repo,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let out = '';
  const keep = (chunk: Buffer) => {
    out += chunk.toString('utf8');
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = once(child, 'exit');
  const group = child.pid as number;
  return {
    output: () => out,
    async waitFor(text, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (!out.includes(text)) {
        if (child.exitCode !== null || child.signalCode !== null) {
          throw new Error(
            `npm ${args.join(' ')} exited before printing ${JSON.stringify(text)}:\n${out}`,
          );
        }
        if (Date.now() > deadline) {
          throw new Error(
            `npm ${args.join(' ')} did not print ${JSON.stringify(text)} in ${timeoutMs} ms:\n${out}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async interrupt() {
      if (groupAlive(group)) process.kill(-group, 'SIGINT');
      const deadline = Date.now() + 10_000;
      while (groupAlive(group)) {
        if (Date.now() > deadline) process.kill(-group, 'SIGKILL');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await exited;
    },
  };
}
