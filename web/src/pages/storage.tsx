/**
 * What deduplication and compression save: logical, unique and stored bytes and the two ratios
 * between them, in total and per repository, over the daily samples, and the largest
 * repositories. The numbers are `GET /api/stats` (the same as `castor stats`), which only admin
 * tokens may read.
 */
import type { ComponentChildren } from "preact";
import { getJson, type Me, type MirrorStatus, PLURAL, type Stats } from "../api.js";
import { Bytes, ErrorNote, Head, Loading, Section, useAsync } from "../common.js";
import { BytesChart } from "../chart.js";
import { formatDate, formatRatio } from "../format.js";
import { href, Link } from "../router.js";

/** Rows of "largest repositories". */
const LARGEST = 10;

export function StoragePage({ me }: { me: Me }) {
  const stats = useAsync(() => (me.admin ? getJson<Stats>("/api/stats?history=365") : Promise.resolve(undefined)), [me.admin]);
  const mirror = useAsync(() => (me.admin ? getJson<MirrorStatus>("/api/castor/mirror") : Promise.resolve(undefined)), [me.admin]);
  if (!me.admin) {
    return (
      <>
        <h1 tabIndex={-1}>Storage</h1>
        <p>
          Storage statistics name every repository, so they need an admin token (write access to all repositories).{" "}
          {me.anonymous && <Link href={href("signin")}>Sign in</Link>}
        </p>
      </>
    );
  }
  const data = stats.data;
  const largest = [...(data?.repositories ?? [])].sort((a, b) => b.logicalBytes - a.logicalBytes);
  return (
    <>
      <h1 tabIndex={-1}>Storage</h1>
      <ErrorNote error={stats.error} />
      {data === undefined ? (
        !stats.error && <Loading what="storage statistics (castor walks every repository)" />
      ) : (
        <>
          <p class="muted">Measured {formatDate(data.takenAt)}.</p>
          <dl class="tiles" data-testid="totals">
            <Tile label="Logical bytes" note={`${data.totals.files} files in ${data.totals.repositories} repositories`}>
              <Bytes value={data.totals.logicalBytes} testId="total-logical" />
            </Tile>
            <Tile label="Unique bytes" note="the distinct chunks the live files need, before compression">
              <Bytes value={data.totals.uniqueBytes ?? 0} testId="total-unique" />
            </Tile>
            <Tile label="Stored bytes" note="those chunks compressed, as stored">
              <Bytes value={data.totals.storedBytes} testId="total-stored" />
            </Tile>
            <Tile label="Deduplication" note="logical ÷ unique">
              <Ratio value={data.totals.dedupRatio} testId="total-dedup" />
            </Tile>
            <Tile label="Compression" note="unique ÷ stored">
              <Ratio value={data.totals.compressionRatio} testId="total-compression" />
            </Tile>
            <Tile label="Reclaimable by gc" note="xorbs no live file references">
              <Bytes value={data.totals.unreferencedXorbBytes} testId="total-unreferenced" />
            </Tile>
          </dl>
          {mirror.data?.upstream && (
            <Section title="Mirror">
              <p class="muted">
                Repositories of {mirror.data.upstream} are fetched when first asked for and then served from here; chunks held already are not fetched again.
              </p>
              <dl class="tiles" data-testid="mirror">
                <Tile label="Mirrored bytes" note={`${mirror.data.files ?? 0} files held`}>
                  <Bytes value={mirror.data.bytes ?? 0} testId="mirror-bytes" />
                </Tile>
                <Tile label="Fetched upstream" note="what holding them cost the upstream link">
                  <Bytes value={mirror.data.fetchedBytes ?? 0} testId="mirror-fetched" />
                </Tile>
                <Tile label="Served from the mirror" note="to clients of this node since it started">
                  <Bytes value={mirror.data.servedBytes ?? 0} testId="mirror-served" />
                </Tile>
                <Tile label="Not fetched" note="bytes of mirrored files whose chunks castor held already">
                  <Bytes value={Math.max(0, (mirror.data.bytes ?? 0) - (mirror.data.fetchedBytes ?? 0))} testId="mirror-saved" />
                </Tile>
              </dl>
            </Section>
          )}
          <Section title="Over time">
            <BytesChart points={data.history} />
            <p class="muted">One sample a day: the last measurement of each UTC day (today’s is the one above).</p>
            <details>
              <summary>Daily samples as a table</summary>
              <table class="list">
                <Head columns={["Day", ["Logical", "num"], ["Stored", "num"], ["Dedup", "num"], ["Compression", "num"]]} />
                <tbody>
                  {data.history.map((sample) => (
                    <tr key={sample.day}>
                      <td>{sample.day}</td>
                      <td class="num">
                        <Bytes value={sample.logicalBytes} />
                      </td>
                      <td class="num">
                        <Bytes value={sample.storedBytes} />
                      </td>
                      <td class="num">{formatRatio(sample.dedupRatio)}</td>
                      <td class="num">{formatRatio(sample.compressionRatio)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </details>
          </Section>
          <Section title="Largest repositories">
            <p class="muted">
              Each repository's stored bytes count the chunks its own files need, so repositories that share content each count it: their sum exceeds the total.
            </p>
            <table class="list" data-testid="repo-storage">
              <Head columns={["Repository", ["Files", "num"], ["Logical", "num"], ["Stored", "num"], ["Dedup", "num"], ["Compression", "num"]]} />
              <tbody>
                {largest.slice(0, LARGEST).map((repo) => (
                  <tr key={`${repo.type}:${repo.name}`} data-repo={`${repo.type}:${repo.name}`}>
                    <td>
                      <Link href={href(`${PLURAL[repo.type]}/${repo.name}`)}>{repo.name}</Link> <span class="muted">{repo.type}</span>
                    </td>
                    <td class="num">{repo.files}</td>
                    <td class="num">
                      <Bytes value={repo.logicalBytes} />
                    </td>
                    <td class="num">
                      <Bytes value={repo.storedBytes} />
                    </td>
                    <td class="num">{formatRatio(repo.dedupRatio)}</td>
                    <td class="num">{formatRatio(repo.compressionRatio)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {largest.length > LARGEST && (
              <p class="muted">
                The {LARGEST} largest of {largest.length} repositories.
              </p>
            )}
          </Section>
        </>
      )}
    </>
  );
}

function Ratio({ value, testId }: { value: number | null; testId: string }) {
  return (
    <data value={String(value ?? "")} data-testid={testId}>
      {formatRatio(value)}
    </data>
  );
}

function Tile({ label, note, children }: { label: string; note: string; children: ComponentChildren }) {
  return (
    <div class="tile">
      <dt>{label}</dt>
      <dd class="tile-value">{children}</dd>
      <dd class="muted">{note}</dd>
    </div>
  );
}
