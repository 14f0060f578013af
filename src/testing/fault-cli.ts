/**
 * Running the `provcat` executable for the fault suite, optionally killing it with SIGKILL at a
 * chosen moment. The suite runs the bundled CLI a user runs (`dist/cli/provcat.cjs`, built by
 * `npm run build`), found from this module's own place in the package, so it works from the
 * sources under vitest and from the installed `provcat/testing`.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** What one run of the CLI did. */
export interface CliRun {
  /** Exit status, `null` when a signal ended it. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The run was ended by our SIGKILL (it had not exited by then). */
  killed: boolean;
  /** It did not finish within the time allowed and was killed for it. */
  hung: boolean;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Options of {@link runCli}. */
export interface RunOptions {
  env: NodeJS.ProcessEnv;
  /** Send SIGKILL this many milliseconds after the start. */
  killAfterMs?: number | undefined;
  /** Give up (SIGKILL, `hung`) after this long; default 120 s. */
  timeoutMs?: number | undefined;
}

/** The bundled CLI of the package this module belongs to; throws when it was not built. */
export function cliPath(): string {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    const pkg = path.join(dir, 'package.json');
    if (existsSync(pkg) && JSON.parse(readFileSync(pkg, 'utf8')).name === 'provcat') {
      const cli = path.join(dir, 'dist', 'cli', 'provcat.cjs');
      if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` first`);
      return cli;
    }
    if (path.dirname(dir) === dir)
      throw new Error('fault suite: the provcat package root was not found');
  }
}

/** Run `provcat ARGS` with `options.env` as its whole environment. */
export function runCli(args: string[], options: RunOptions): Promise<CliRun> {
  const cli = cliPath();
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args], {
      env: options.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let exited = false;
    let killed = false;
    let hung = false;
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr = (stderr + c).slice(-20_000);
    });
    const kill = options.killAfterMs;
    const killer =
      kill === undefined
        ? undefined
        : setTimeout(() => {
            if (!exited) killed = child.kill('SIGKILL');
          }, kill);
    const guard = setTimeout(() => {
      if (!exited) hung = child.kill('SIGKILL');
    }, options.timeoutMs ?? 120_000);
    child.on('exit', () => {
      exited = true;
      clearTimeout(killer);
      clearTimeout(guard);
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      resolve({
        code,
        signal,
        killed: killed && signal === 'SIGKILL' && !hung,
        hung,
        stdout,
        stderr,
        ms: performance.now() - started,
      });
    });
  });
}

/** The command line of a run, to paste into a shell (with the environment that matters). */
export function commandLine(args: string[], env: Record<string, string | undefined> = {}): string {
  const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);
  const vars = Object.entries(env)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => `${k}=${quote(v as string)}`);
  return [...vars, 'node', 'dist/cli/provcat.cjs', ...args.map(quote)].join(' ');
}
