//! Schemas are parsed on one thread of their own.
//!
//! Parsing takes many times a schema's text while it runs (apache-avro
//! holds about twenty times the text of a large record), and the allocator
//! keeps what a thread freed for that thread's later use. Parsed on every
//! worker thread, a large schema would leave that much behind once per
//! thread; parsed here, once for the process. The caller waits for the
//! answer (parsing was always synchronous work on its thread), and parses
//! itself should the thread be gone.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};

use evolve_compat::{Reference, Schema, SchemaError, SchemaType};

struct Job {
    schema_type: SchemaType,
    text: String,
    references: Vec<Reference>,
    answer: Sender<Result<Schema, SchemaError>>,
}

fn thread() -> Option<Sender<Job>> {
    static JOBS: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (sender, receiver) = channel::<Job>();
        std::thread::Builder::new()
            .name("evolve-registry-parser".into())
            .spawn(move || {
                for job in receiver {
                    let parsed = Schema::parse(job.schema_type, &job.text, &job.references);
                    drop(job.text);
                    let _ = job.answer.send(parsed);
                }
            })
            .ok()
            .map(|_| Mutex::new(sender))
    });
    jobs.as_ref()?.lock().ok().map(|s| s.clone())
}

/// [`Schema::parse`], on the parser thread.
pub fn parse(
    schema_type: SchemaType,
    text: &str,
    references: &[Reference],
) -> Result<Schema, SchemaError> {
    if let Some(jobs) = thread() {
        let (answer, receive) = channel();
        let job = Job {
            schema_type,
            text: text.to_owned(),
            references: references.to_vec(),
            answer,
        };
        if jobs.send(job).is_ok()
            && let Ok(parsed) = receive.recv()
        {
            return parsed;
        }
    }
    Schema::parse(schema_type, text, references)
}
