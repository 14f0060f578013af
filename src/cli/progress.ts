/**
 * A one-line progress bar on a terminal. Drawn only when the stream is a TTY; redrawn at most
 * ten times a second; cleared when done.
 *
 * @module
 */
import type { Writable } from 'node:stream';
import type { Progress, ProgressCallback } from '../store/store.js';

/** Human-readable bytes (binary units). */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** A bar for one labelled transfer. */
export function progressBar(
  out: Writable & { isTTY?: boolean; columns?: number },
  label: string,
): { onProgress: ProgressCallback | undefined; done(): void } {
  if (!out.isTTY) return { onProgress: undefined, done() {} };
  let last = 0;
  let drawn = false;
  const started = Date.now();
  const draw = (p: Progress) => {
    const width = 24;
    const frac = p.totalBytes ? Math.min(1, p.bytes / p.totalBytes) : undefined;
    const bar =
      frac === undefined
        ? ''
        : `[${'#'.repeat(Math.round(frac * width)).padEnd(width, '.')}] ${(frac * 100).toFixed(0)}% `;
    const secs = (Date.now() - started) / 1000;
    const rate = secs > 0 ? `${formatBytes(p.bytes / secs)}/s` : '';
    const files = p.totalFiles ? ` ${p.files ?? 0}/${p.totalFiles} files` : '';
    const total = p.totalBytes ? ` / ${formatBytes(p.totalBytes)}` : '';
    const line = `${label} ${bar}${formatBytes(p.bytes)}${total}${files} ${rate}`;
    out.write(`\r${line.slice(0, (out.columns ?? 80) - 1)}\u001b[K`);
    drawn = true;
  };
  return {
    onProgress(p) {
      const now = Date.now();
      if (now - last < 100 && p.bytes !== p.totalBytes) return;
      last = now;
      draw(p);
    },
    done() {
      if (drawn) out.write('\r\u001b[K');
    },
  };
}
