/**
 * Start and stop Azurite's blob service (the `azurite` devDependency, 3.35.0) for tests and for
 * `npm run server:azurite`.
 *
 * Azurite runs as a child process of this one, from the installed package (so a fresh clone works
 * after `npm ci`), on 127.0.0.1 with the flags the Azure tests need:
 * `--inMemoryPersistence` (nothing on disk, nothing left behind), `--skipApiVersionCheck` (SDK
 * 12.32 sends x-ms-version 2026-04-06, newer than Azurite 3.35 knows), `--disableTelemetry` (on
 * by default since 3.34) and `--silent` (no access log). Readiness is polled over HTTP rather than
 * read from its output: an answer of any status proves the port serves. Start times of several
 * seconds have been seen on loaded machines, so the wait allows 30 s; if Azurite exits or does
 * not answer in time, the error carries the tail of its output.
 *
 * @module
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { devBlobEndpoint, devConnectionString } from './azure-dev-account.js';

/** Options of {@link startAzurite}. */
export interface AzuriteOptions {
  /** The port on 127.0.0.1; 0 (the default) picks a free one. */
  port?: number;
  /** How long to wait for the first answer (default 30 s). */
  readyTimeoutMs?: number;
  /** Azurite's cap on in-memory blob data in MB (`--extentMemoryLimit`; default: Azurite's). */
  extentMemoryLimitMb?: number;
  /** Where Azurite's output goes besides the kept tail: `'inherit'` shows it on this process's. */
  output?: 'keep' | 'inherit';
}

/** A running Azurite blob service. */
export interface AzuriteServer {
  /** The blob endpoint, `http://127.0.0.1:PORT/devstoreaccount1`. */
  readonly url: string;
  /** The development account's connection string with `BlobEndpoint` set to {@link url}. */
  readonly connectionString: string;
  readonly port: number;
  readonly pid: number;
  /** Resolves with the exit code (or signal name) when Azurite exits, for whatever reason. */
  readonly exited: Promise<number | string>;
  /** The last lines Azurite printed (stdout and stderr together). */
  logTail(lines?: number): string;
  /** Stop Azurite (SIGTERM, then SIGKILL after 5 s) and wait until it has exited. */
  stop(): Promise<void>;
}

/** The path of Azurite's blob-service entry point in the installed package. */
export function azuriteBlobMain(): string {
  const require = createRequire(import.meta.url);
  const pkgPath = require.resolve('azurite/package.json');
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8')) as {
    version: string;
    bin: Record<string, string>;
  };
  const bin = pkg.bin['azurite-blob'];
  if (!bin)
    throw new Error(`the azurite package at ${pkgPath} (${pkg.version}) has no azurite-blob`);
  return path.resolve(path.dirname(pkgPath), bin);
}

/** The arguments Azurite's blob service runs with on `port`. */
export function azuriteArgs(port: number, extentMemoryLimitMb?: number): string[] {
  const args = [
    '--blobHost',
    '127.0.0.1',
    '--blobPort',
    String(port),
    '--inMemoryPersistence',
    '--skipApiVersionCheck',
    '--disableTelemetry',
    '--silent',
  ];
  if (extentMemoryLimitMb !== undefined)
    args.push('--extentMemoryLimit', String(extentMemoryLimitMb));
  return args;
}

/** A port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/**
 * True when something answers HTTP on the blob endpoint `url` (any status: Azurite answers an
 * unsigned request with 403). False when the connection is refused or times out.
 */
export async function azuriteAnswers(url: string, timeoutMs = 2000): Promise<boolean> {
  try {
    const response = await fetch(`${url}?comp=list`, { signal: AbortSignal.timeout(timeoutMs) });
    await response.body?.cancel();
    return true;
  } catch (error) {
    // fetch reports a refused connection as TypeError and a timeout as TimeoutError: nothing is
    // serving (yet). Anything else is a bug here and propagates.
    if (error instanceof Error && (error.name === 'TypeError' || error.name === 'TimeoutError')) {
      return false;
    }
    throw error;
  }
}

/** This process's environment without AZURITE_ACCOUNTS (which would replace the dev account). */
function childEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.AZURITE_ACCOUNTS;
  return env;
}

function tailOf(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

/**
 * Start Azurite's blob service; resolves once it answers on its port. With no port given, a free
 * one is picked (and another one tried, up to three times, if it was taken in the meantime).
 */
export async function startAzurite(options: AzuriteOptions = {}): Promise<AzuriteServer> {
  if (options.port) return startOnce(options.port, options);
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(await freePort(), options);
    } catch (error) {
      if (attempt >= 3 || !String((error as Error).message).includes('EADDRINUSE')) throw error;
    }
  }
}

async function startOnce(port: number, options: AzuriteOptions): Promise<AzuriteServer> {
  const timeoutMs = options.readyTimeoutMs ?? 30_000;
  const main = azuriteBlobMain();
  const args = azuriteArgs(port, options.extentMemoryLimitMb);
  // Its working directory is the temp dir: with in-memory persistence Azurite writes nothing,
  // and if a future release did, it would not land in the repository.
  const child: ChildProcess = spawn(process.execPath, [main, ...args], {
    cwd: os.tmpdir(),
    stdio: ['ignore', 'pipe', 'pipe'],
    env: childEnv(),
  });
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-16_000);
    if (options.output === 'inherit') process.stderr.write(chunk);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let exitedWith: number | string | undefined;
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      exitedWith = code ?? signal ?? 'unknown';
      resolve(exitedWith);
    });
  });
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  const url = devBlobEndpoint(port);
  const command = `${process.execPath} ${main} ${args.join(' ')}`;

  const stop = async () => {
    if (exitedWith !== undefined) return;
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(killer);
  };

  const started = Date.now();
  for (;;) {
    const failure = await Promise.race([
      spawnError,
      exited.then((code) => new Error(`Azurite exited (${code}) before answering`)),
      azuriteAnswers(url, 1000).then((up) => (up ? null : undefined)),
    ]);
    if (failure === null) break;
    if (failure instanceof Error || Date.now() - started > timeoutMs) {
      await stop();
      const reason =
        failure instanceof Error
          ? failure.message
          : `Azurite did not answer on ${url} within ${timeoutMs / 1000} s`;
      throw new Error(
        `${reason}\ncommand: ${command}\n--- Azurite output (last lines)\n${tailOf(output, 30) || '(none)'}`,
        {
          cause: failure instanceof Error ? failure : undefined,
        },
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    url,
    connectionString: devConnectionString(url),
    port,
    pid: child.pid as number,
    exited,
    logTail: (lines = 30) => tailOf(output, lines),
    stop,
  };
}
