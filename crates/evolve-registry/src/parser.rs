//! Schemas are parsed on one thread of their own.
//!
//! Parsing takes many times a schema's text while it runs (apache-avro
//! holds about twenty times the text of a large record), and the allocator
//! keeps what a thread freed for that thread's later use. Parsed on every
//! worker thread, a large schema would leave that much behind once per
//! thread; parsed here, once for the process. The same goes for the
//! normalized form of an Avro schema, which reads the text into a tree of
//! JSON values. The caller waits for the answer (parsing was always
//! synchronous work on its thread), and does the work itself should the
//! thread be gone.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use evolve_compat::{Reference, Schema, SchemaError, SchemaType};

type Job = Box<dyn FnOnce() + Send>;

fn thread() -> Option<Sender<Job>> {
    static JOBS: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (sender, receiver) = channel::<Job>();
        std::thread::Builder::new()
            .name("evolve-registry-parser".into())
            .spawn(move || {
                for job in receiver {
                    job();
                }
            })
            .ok()
            .map(|_| Mutex::new(sender))
    });
    jobs.as_ref()?.lock().ok().map(|s| s.clone())
}

/// Runs `work` on the parser thread and waits for its answer; runs it
/// here when the thread is gone (or died on it).
fn on_parser_thread<T: Send + 'static>(work: impl Fn() -> T + Send + Sync + 'static) -> T {
    let work = Arc::new(work);
    if let Some(jobs) = thread() {
        let (answer, receive) = channel();
        let remote = Arc::clone(&work);
        let job: Job = Box::new(move || {
            let _ = answer.send(remote());
        });
        if jobs.send(job).is_ok()
            && let Ok(done) = receive.recv()
        {
            return done;
        }
    }
    work()
}

/// [`Schema::parse_stored`], on the parser thread: the registry reads
/// every schema, stored or offered, as a stored one, and asks
/// [`Schema::new_schema_error`] itself of the schemas it would store anew
/// (see `State::check_new_schema`).
pub fn parse(
    schema_type: SchemaType,
    text: &str,
    references: &[Reference],
) -> Result<Schema, SchemaError> {
    let (text, references) = (text.to_owned(), references.to_vec());
    on_parser_thread(move || Schema::parse_stored(schema_type, &text, &references))
}

/// [`evolve_compat::avro::normalized_form`], on the parser thread.
pub fn normalized_avro(text: &str, references: &[Reference]) -> Option<String> {
    let (text, references) = (text.to_owned(), references.to_vec());
    on_parser_thread(move || evolve_compat::avro::normalized_form(&text, &references))
}
