#[test]
fn one() {
    let p = std::fs::read(std::env::var("INPUT").unwrap()).unwrap();
    eprintln!("{}", thor_sim::acked::trace(&p));
}
